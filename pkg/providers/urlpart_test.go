package providers_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/providers/bedrock"
	"github.com/tollgate/tollgate/pkg/providers/gemini"
	"github.com/tollgate/tollgate/pkg/providers/openai"
	"github.com/valyala/fasthttp"
)

const (
	urlTestKey  = "sk-URL-TEST-KEY"
	urlTestBody = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
)

// urlKind is one provider kind's request template: the fixed text before
// and after the model's place in the path (no place: the name travels in
// the body), and the exact query.
type urlKind struct {
	name           string
	prov           providers.Provider
	stream         bool
	prefix, suffix string
	inPath         bool
	query          string
}

func urlKinds(t testing.TB) []urlKind {
	t.Helper()
	must := func(p providers.Provider, err error) providers.Provider {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	oa := must(openai.New(openai.Options{Name: "oa", BaseURL: "https://up.test/v1", APIKey: urlTestKey}))
	az := must(openai.New(openai.Options{Name: "az", BaseURL: "https://up.test", APIKey: urlTestKey, Azure: true, APIVersion: "2024-10-21"}))
	an := must(anthropic.New(anthropic.Options{Name: "an", BaseURL: "https://up.test", APIKey: urlTestKey}))
	ge := must(gemini.New(gemini.Options{Name: "ge", BaseURL: "https://up.test", APIKey: urlTestKey}))
	br := must(bedrock.New(bedrock.Options{Name: "br", BaseURL: "https://up.test", Region: "us-east-1", APIKey: urlTestKey}))
	brSig := must(bedrock.New(bedrock.Options{Name: "br", BaseURL: "https://up.test", Region: "us-east-1",
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: urlTestKey}))
	return []urlKind{
		{name: "openai", prov: oa, prefix: "/v1/chat/completions"},
		{name: "openai stream", prov: oa, stream: true, prefix: "/v1/chat/completions"},
		{name: "anthropic", prov: an, prefix: "/v1/messages"},
		{name: "azure", prov: az, inPath: true, prefix: "/openai/deployments/", suffix: "/chat/completions", query: "api-version=2024-10-21"},
		{name: "azure stream", prov: az, stream: true, inPath: true, prefix: "/openai/deployments/", suffix: "/chat/completions", query: "api-version=2024-10-21"},
		{name: "gemini", prov: ge, inPath: true, prefix: "/v1beta/", suffix: ":generateContent"},
		{name: "gemini stream", prov: ge, stream: true, inPath: true, prefix: "/v1beta/", suffix: ":streamGenerateContent", query: "alt=sse"},
		{name: "bedrock", prov: br, inPath: true, prefix: "/model/", suffix: "/converse"},
		{name: "bedrock stream", prov: br, stream: true, inPath: true, prefix: "/model/", suffix: "/converse-stream"},
		{name: "bedrock sigv4", prov: brSig, inPath: true, prefix: "/model/", suffix: "/converse"},
	}
}

// build builds a chat call for model and returns the request line's URI as
// it goes on the wire.
func (k urlKind) build(model string) (string, *fasthttp.Request, error) {
	req := &fasthttp.Request{}
	req.URI().DisablePathNormalizing = true // as the gateway's upstream clients send it
	err := k.prov.Build(req, &providers.Call{Endpoint: providers.Chat, Body: []byte(urlTestBody), Model: model, Stream: k.stream})
	return string(req.URI().RequestURI()), req, err
}

// TestBuildURLHostileNames asserts the exact request URI of every provider
// kind for names an attacker would try (issue #17).
func TestBuildURLHostileNames(t *testing.T) {
	names := []struct {
		name, model string
		seg         string // the escaped segment; "" where it is refused
		gemini      string // Gemini's resource path when not "models/"+seg; "-" refused
	}{
		{name: "plain", model: "gemini-2.0-flash", seg: "gemini-2.0-flash"},
		{name: "dot dot", model: "../../v1/files", seg: "..%2F..%2Fv1%2Ffiles", gemini: "-"},
		{name: "slash", model: "a/b", seg: "a%2Fb", gemini: "-"},
		{name: "query", model: "x:streamGenerateContent?alt=sse&key=", seg: "x%3AstreamGenerateContent%3Falt%3Dsse%26key%3D"},
		{name: "fragment", model: "a#frag", seg: "a%23frag"},
		{name: "escaped slash", model: "..%2f..%2fx", seg: "..%252f..%252fx"},
		{name: "colon", model: "anthropic.claude-v2:1", seg: "anthropic.claude-v2%3A1"},
		{name: "space and plus", model: "a b+c", seg: "a%20b%2Bc"},
		{name: "non-ASCII", model: "modèle-ü", seg: "mod%C3%A8le-%C3%BC"},
		{name: "tuned model", model: "tunedModels/x-1", seg: "tunedModels%2Fx-1", gemini: "tunedModels/x-1"},
		{name: "models prefix", model: "models/gemini-pro", seg: "models%2Fgemini-pro", gemini: "models/gemini-pro"},
		{name: "models prefix with a path", model: "models/../../x", seg: "models%2F..%2F..%2Fx", gemini: "-"},
		{name: "models prefix, hostile id", model: "models/x:y?key=", seg: "models%2Fx%3Ay%3Fkey%3D", gemini: "models/x%3Ay%3Fkey%3D"},
		{name: "dot", model: ".", seg: ""},
		{name: "dot dot alone", model: "..", seg: ""},
		{name: "gemini dot dot id", model: "models/..", seg: "models%2F..", gemini: "-"},
		{name: "empty", model: "", seg: ""},
		{name: "CR LF", model: "a\r\nHost: evil", seg: ""},
		{name: "NUL", model: "a\x00b", seg: ""},
		{name: "DEL", model: "a\x7fb", seg: ""},
		{name: "not UTF-8", model: "a\xffb", seg: ""},
		{name: "512 bytes", model: strings.Repeat("a", 512), seg: strings.Repeat("a", 512)},
		{name: "overlong", model: strings.Repeat("a", 513), seg: ""},
	}
	for _, k := range urlKinds(t) {
		for _, n := range names {
			t.Run(k.name+"/"+n.name, func(t *testing.T) {
				got, _, err := k.build(n.model)
				seg := n.seg
				if strings.HasPrefix(k.name, "gemini") && seg != "" {
					seg = "models/" + seg
					if n.gemini != "" {
						seg = n.gemini
					}
				}
				if !k.inPath {
					// The name travels in the body; the line is fixed.
					seg = ""
				}
				refused := k.inPath && (seg == "" || seg == "-")
				if refused {
					var pe *providers.ParamError
					if !errors.As(err, &pe) || pe.Param != "model" || pe.Code != providers.CodeInvalidURLValue {
						t.Fatalf("Build(%q) = %v (URI %q), want a ParamError for model", n.model, err, got)
					}
					return
				}
				if err != nil {
					t.Fatalf("Build(%q): %v", n.model, err)
				}
				want := k.prefix + seg + k.suffix
				if k.query != "" {
					want += "?" + k.query
				}
				if got != want {
					t.Errorf("request URI\n%q\nwant\n%q", got, want)
				}
			})
		}
	}
}

// FuzzBuildURL checks, for arbitrary model names, that every provider
// kind's request URI keeps its template's fixed segments and query: the
// name fills exactly its one place (a single segment that decodes back to
// the name) or is refused, and the provider's key never reaches the URI.
func FuzzBuildURL(f *testing.F) {
	for _, s := range []string{"gpt-4o", "../x", "a/b", "x?y=1&key=", "a#b", "%2f", "models/x", "tunedModels/../x", "é", "\r\n", ".."} {
		f.Add(s)
	}
	kinds := urlKinds(f)
	f.Fuzz(func(t *testing.T, model string) {
		for _, k := range kinds {
			uri, req, err := k.build(model)
			if err != nil {
				var pe *providers.ParamError
				if !errors.As(err, &pe) {
					t.Fatalf("%s: Build(%q) failed with %v, want a ParamError", k.name, model, err)
				}
				continue
			}
			if strings.Contains(uri, urlTestKey) || strings.Contains(string(req.Header.Peek("Host")), urlTestKey) {
				t.Fatalf("%s: the key reached the URI %q", k.name, uri)
			}
			path, query, _ := strings.Cut(uri, "?")
			if query != k.query {
				t.Fatalf("%s: Build(%q): query %q, want %q", k.name, model, query, k.query)
			}
			if !k.inPath {
				if path != k.prefix {
					t.Fatalf("%s: Build(%q): path %q, want %q", k.name, model, path, k.prefix)
				}
				continue
			}
			if !strings.HasPrefix(path, k.prefix) || !strings.HasSuffix(path, k.suffix) || len(path) < len(k.prefix)+len(k.suffix) {
				t.Fatalf("%s: Build(%q): path %q lost its template %q…%q", k.name, model, path, k.prefix, k.suffix)
			}
			place, name := path[len(k.prefix):len(path)-len(k.suffix)], model
			if strings.HasPrefix(k.name, "gemini") {
				// Gemini: {collection}/{id}, the collection fixed text.
				coll, id, ok := strings.Cut(place, "/")
				if !ok || coll != "models" && coll != "tunedModels" {
					t.Fatalf("gemini: Build(%q): resource %q is not collection/id", model, place)
				}
				place = id
				name = strings.TrimPrefix(strings.TrimPrefix(model, "models/"), "tunedModels/")
			}
			if strings.ContainsAny(place, "/?#:") {
				t.Fatalf("%s: Build(%q): the name's place %q is not one escaped segment", k.name, model, place)
			}
			if dec, err := url.PathUnescape(place); err != nil || dec != name {
				t.Fatalf("%s: Build(%q): segment %q decodes to %q (%v)", k.name, model, place, dec, err)
			}
		}
	})
}
