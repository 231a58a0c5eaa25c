package registry

import (
	"errors"
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/kind"
	"github.com/valyala/fasthttp"
)

func TestKinds(t *testing.T) {
	all := []providers.Endpoint{providers.Chat, providers.Completions, providers.Embeddings, providers.Responses}
	tests := []struct {
		name, kind string
		p          config.Provider
		base       string // BaseURL(p)
		// hasKey is HasKey(p); keyless is HasKey with no credential at all.
		hasKey, keyless bool
		keyHeader       string // "" when api_keys do not apply
		keyValue        string // the header's value for key "k"
		speaks          []providers.Endpoint
		passThrough     bool
	}{
		{name: "openai base_url", kind: kind.OpenAI, p: config.Provider{BaseURL: "http://h/v1", APIKey: "k"}, base: "http://h/v1",
			hasKey: true, keyHeader: "Authorization", keyValue: "Bearer k", speaks: all, passThrough: true},
		{name: "openai preset", kind: kind.OpenAI, p: config.Provider{Preset: "groq", APIKey: "k"}, base: "https://api.groq.com/openai/v1",
			hasKey: true, keyHeader: "Authorization", keyValue: "Bearer k", speaks: all, passThrough: true},
		{name: "azure", kind: kind.Azure, p: config.Provider{BaseURL: "https://r.openai.azure.com", APIVersion: "2024-10-21", APIKey: "k"},
			base: "https://r.openai.azure.com", hasKey: true, keyHeader: "api-key", keyValue: "k", speaks: all, passThrough: true},
		{name: "anthropic", kind: kind.Anthropic, p: config.Provider{APIKey: "k"}, base: "https://api.anthropic.com",
			hasKey: true, keyHeader: "x-api-key", keyValue: "k", speaks: []providers.Endpoint{providers.Chat}},
		{name: "gemini", kind: kind.Gemini, p: config.Provider{APIKey: "k"}, base: "https://generativelanguage.googleapis.com",
			hasKey: true, keyHeader: "x-goog-api-key", keyValue: "k", speaks: []providers.Endpoint{providers.Chat, providers.Embeddings}},
		{name: "bedrock sigv4", kind: kind.Bedrock, p: config.Provider{Region: "eu-west-1", AccessKeyID: "AKID", SecretAccessKey: "secret"},
			base: "https://bedrock-runtime.eu-west-1.amazonaws.com", hasKey: true, speaks: []providers.Endpoint{providers.Chat}},
		{name: "bedrock without secret", kind: kind.Bedrock, p: config.Provider{Region: "eu-west-1", AccessKeyID: "AKID"},
			base: "https://bedrock-runtime.eu-west-1.amazonaws.com", speaks: []providers.Endpoint{providers.Chat}},
		{name: "bedrock api key and base_url", kind: kind.Bedrock, p: config.Provider{BaseURL: "https://vpce.example.com", Region: "eu-west-1", APIKey: "k"},
			base: "https://vpce.example.com", hasKey: true, speaks: []providers.Endpoint{providers.Chat}},
		{name: "mock", kind: kind.Mock, p: config.Provider{BaseURL: "http://127.0.0.1:9/v1"}, base: "http://127.0.0.1:9/v1",
			hasKey: true, keyless: true, keyHeader: "Authorization", keyValue: "Bearer k", speaks: all, passThrough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, ok := Lookup(tt.kind)
			if !ok {
				t.Fatalf("no kind %s", tt.kind)
			}
			tt.p.Name, tt.p.Kind = "p", tt.kind
			if got := k.BaseURL(tt.p); got != tt.base {
				t.Errorf("BaseURL %q, want %q", got, tt.base)
			}
			if got := k.HasKey(tt.p); got != tt.hasKey {
				t.Errorf("HasKey %v, want %v", got, tt.hasKey)
			}
			if got := k.HasKey(config.Provider{Kind: tt.kind}); got != tt.keyless {
				t.Errorf("HasKey without credentials %v, want %v", got, tt.keyless)
			}
			h, v, ok := k.Key("k")
			if h != tt.keyHeader || v != tt.keyValue || ok != (tt.keyHeader != "") {
				t.Errorf("Key: %q: %q (%v), want %q: %q", h, v, ok, tt.keyHeader, tt.keyValue)
			}
			for _, ep := range all {
				want := false
				for _, s := range tt.speaks {
					want = want || s == ep
				}
				if got := k.Speaks(ep); got != want {
					t.Errorf("Speaks(%s) %v, want %v", ep, got, want)
				}
			}
			if k.PassThrough != tt.passThrough {
				t.Errorf("PassThrough %v, want %v", k.PassThrough, tt.passThrough)
			}
			if _, err := k.New(tt.p); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// TestSetKey checks a rotated key replaces the one Build wrote, in the
// header the kind's server reads.
func TestSetKey(t *testing.T) {
	for _, k := range All() {
		t.Run(k.Name, func(t *testing.T) {
			p := config.Provider{Name: "p", Kind: k.Name, BaseURL: "http://h/v1", APIKey: "old", APIVersion: "2024-10-21", Region: "us-east-1"}
			prov, err := k.New(p)
			if err != nil {
				t.Fatal(err)
			}
			req := &fasthttp.Request{}
			if err := prov.Build(req, &providers.Call{Endpoint: providers.Chat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), Model: "m"}); err != nil {
				t.Fatal(err)
			}
			h, v, ok := k.Key("new")
			if !ok {
				k.SetKey(req, "new") // a no-op
				if got := string(req.Header.Peek("Authorization")); got != "Bearer old" {
					t.Errorf("Authorization %q after SetKey, want the provider's own", got)
				}
				return
			}
			if got := string(req.Header.Peek(h)); got != k.keyPrefix+"old" {
				t.Fatalf("Build wrote %s: %q, not the configured key", h, got)
			}
			k.SetKey(req, "new")
			if got := string(req.Header.Peek(h)); got != v {
				t.Errorf("%s: %q, want %q", h, got, v)
			}
		})
	}
}

// TestSpeaksMatchesProviders checks Speaks against what each kind's
// Provider builds: an endpoint it does not speak is refused by Build.
func TestSpeaksMatchesProviders(t *testing.T) {
	for _, k := range All() {
		p := config.Provider{Name: "p", Kind: k.Name, BaseURL: "http://h/v1", APIKey: "k", APIVersion: "2024-10-21", Region: "us-east-1"}
		prov, err := k.New(p)
		if err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		for ep := providers.Chat; ep <= providers.Responses; ep++ {
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"input":"hi","prompt":"hi"}`
			err := prov.Build(&fasthttp.Request{}, &providers.Call{Endpoint: ep, Body: []byte(body), Model: "m"})
			var pe *providers.ParamError
			if refused := errors.As(err, &pe); refused == k.Speaks(ep) {
				t.Errorf("%s %s: Build %v, Speaks %v", k.Name, ep, err, k.Speaks(ep))
			}
			if s, ok := prov.(interface{ SpeaksResponses() bool }); ok && s.SpeaksResponses() && !k.Speaks(providers.Responses) {
				t.Errorf("%s: the provider speaks the Responses API, the kind does not", k.Name)
			}
		}
	}
}

// TestTableMatchesKinds checks the registry has one Kind per kind.Spec, in
// the same order, carrying that Spec.
func TestTableMatchesKinds(t *testing.T) {
	specs, ks := kind.All(), All()
	if len(specs) != len(ks) {
		t.Fatalf("%d kinds, %d in the registry", len(specs), len(ks))
	}
	for i, s := range specs {
		if ks[i].Name != s.Name || ks[i].BaseURL(config.Provider{}) == "" && s.BaseURL == kind.BaseURLOptional {
			t.Errorf("registry kind %d is %s, want %s with a default base URL when it is optional", i, ks[i].Name, s.Name)
		}
	}
	if _, ok := Lookup("opnai"); ok {
		t.Error("Lookup found an unknown kind")
	}
}
