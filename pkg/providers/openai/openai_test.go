package openai

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/kind"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/valyala/fasthttp"
)

// call reads the fields the gateway would from body.
func call(body string, stream, includeUsage bool) *providers.Call {
	c := &providers.Call{Endpoint: providers.Chat, Body: []byte(body), Model: "m", Stream: stream, IncludeUsage: includeUsage}
	m := gjson.Get(body, "model")
	c.ModelRaw, c.ModelIdx = m.Raw, m.Index
	if so := gjson.Get(body, "stream_options"); so.Exists() {
		c.StreamOptionsRaw, c.StreamOptionsIdx = so.Raw, so.Index
	}
	return c
}

func TestBuildBodyEdits(t *testing.T) {
	p, err := New(Options{Name: "t", Preset: "openai", APIKey: "sk"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		body       string
		stream     bool
		clientAsks bool
		rename     string
		clamp      int64
		want       map[string]string // gjson path -> raw value
	}{
		{"untouched", `{"model":"m","messages":[]}`, false, false, "", 0, map[string]string{"model": `"m"`, "stream_options": ""}},
		{"renamed", `{"model":"m","messages":[]}`, false, false, "up-m", 0, map[string]string{"model": `"up-m"`}},
		{"stream asks for usage", `{"model":"m","stream":true}`, true, false, "", 0, map[string]string{"stream_options.include_usage": "true"}},
		{"client asked already", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, true, true, "", 0, map[string]string{"stream_options.include_usage": "true"}},
		{"include_usage false flipped", `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, true, false, "", 0, map[string]string{"stream_options.include_usage": "true"}},
		{"empty stream_options", `{"model":"m","stream":true,"stream_options":{}}`, true, false, "", 0, map[string]string{"stream_options.include_usage": "true"}},
		{"other stream option kept", `{"model":"m","stream":true,"stream_options":{"x":1}}`, true, false, "", 0, map[string]string{"stream_options.include_usage": "true", "stream_options.x": "1"}},
		{"clamp existing max_tokens", `{"model":"m","max_tokens":4000}`, false, false, "", 100, map[string]string{"max_tokens": "100"}},
		{"clamp adds the preset field", `{"model":"m"}`, false, false, "", 100, map[string]string{"max_completion_tokens": "100"}},
		// One stream_options member, whatever the client's was (issue #41).
		{"null stream_options replaced", `{"model":"m","stream":true,"stream_options":null}`, true, false, "", 0, map[string]string{"stream_options.include_usage": "true"}},
		{"clamp every limit field", `{"max_tokens":4000,"model":"m","max_completion_tokens":3000}`, false, false, "", 100,
			map[string]string{"max_tokens": "100", "max_completion_tokens": "100"}},
		{"all edits at once", `{"stream_options":{},"model":"m","max_completion_tokens":9,"stream":true}`, true, false, "up", 5,
			map[string]string{"model": `"up"`, "max_completion_tokens": "5", "stream_options.include_usage": "true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := call(tc.body, tc.stream, tc.clientAsks)
			if tc.rename != "" {
				c.ModelJSON = []byte(`"` + tc.rename + `"`)
			}
			c.ClampMaxTokens = tc.clamp
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			out := string(req.Body())
			if !gjson.Valid(out) {
				t.Fatalf("invalid JSON: %s", out)
			}
			if n := strings.Count(out, `"stream_options"`); n > 1 {
				t.Errorf("%d stream_options members: %s", n, out)
			}
			for path, want := range tc.want {
				if got := gjson.Get(out, path).Raw; got != want {
					t.Errorf("%s = %s, want %s (body %s)", path, got, want, out)
				}
			}
		})
	}
}

func TestBuildRequestLine(t *testing.T) {
	tests := []struct {
		name            string
		o               Options
		ep              providers.Endpoint
		wantURI, header string
		headerValue     string
	}{
		{"preset", Options{Preset: "groq", APIKey: "k"}, providers.Chat, "https://api.groq.com/openai/v1/chat/completions", "Authorization", "Bearer k"},
		{"base url", Options{BaseURL: "http://127.0.0.1:9/v1/", APIKey: "k"}, providers.Embeddings, "http://127.0.0.1:9/v1/embeddings", "Authorization", "Bearer k"},
		{"azure", Options{Azure: true, BaseURL: "https://x.openai.azure.com", APIVersion: "2024-10-21", APIKey: "az"}, providers.Chat,
			"https://x.openai.azure.com/openai/deployments/m/chat/completions?api-version=2024-10-21", "api-key", "az"},
		{"extra header", Options{BaseURL: "http://h/v1", Headers: map[string]string{"HTTP-Referer": "https://app"}}, providers.Chat, "http://h/v1/chat/completions", "HTTP-Referer", "https://app"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Name = "t"
			p, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			var req fasthttp.Request
			c := call(`{"model":"m"}`, false, false)
			c.Endpoint = tc.ep
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			if got := req.URI().String(); got != tc.wantURI {
				t.Errorf("URI = %s, want %s", got, tc.wantURI)
			}
			if got := string(req.Header.Peek(tc.header)); got != tc.headerValue {
				t.Errorf("%s = %q, want %q", tc.header, got, tc.headerValue)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{{Preset: "nope"}, {BaseURL: "ftp://x"}, {}, {Azure: true, BaseURL: "https://x"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestPresetsMatchConfig(t *testing.T) {
	var names []string
	for n := range Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	want := slices.Clone(kind.OpenAIPresets)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("presets %v, config accepts %v", names, want)
	}
}

func TestStreamHidesUnaskedUsage(t *testing.T) {
	p, _ := New(Options{Name: "t", BaseURL: "http://h/v1"})
	events := []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n",
		"data: [DONE]\n\n",
	}
	for _, asked := range []bool{false, true} {
		s := p.Stream(&providers.Call{IncludeUsage: asked})
		var out []byte
		var st providers.State
		for _, ev := range events {
			var err error
			out, st, err = s.Event(out, []byte(ev))
			if err != nil {
				t.Fatal(err)
			}
		}
		if st != providers.Done || !s.Complete() {
			t.Errorf("asked=%v: state %v complete %v", asked, st, s.Complete())
		}
		if u := s.Usage(); u.Prompt != 3 || u.Completion != 1 || u.Cached != 2 || !u.Reported {
			t.Errorf("asked=%v: usage %+v", asked, u)
		}
		if has := strings.Contains(string(out), `"usage"`); has != asked {
			t.Errorf("asked=%v: usage chunk forwarded = %v", asked, has)
		}
		s.Close()
	}
}

func TestStreamFailures(t *testing.T) {
	p, _ := New(Options{Name: "t", BaseURL: "http://h/v1"})
	for _, ev := range []string{"data: {bad\n\n", "data: " + strings.Repeat("[", 200) + "\n\n", "data: {\"error\":{\"message\":\"boom\"}}\n\n"} {
		s := p.Stream(&providers.Call{})
		out, st, err := s.Event(nil, []byte(ev))
		if st != providers.Failed || err == nil || len(out) != 0 {
			t.Errorf("%q: state %v err %v out %q", ev, st, err, out)
		}
	}
}

// TestParseUsage: counts are read under both naming schemes; usage with a
// count that is not a non-negative integer, or with no count at all, is not
// reported (the gateway then estimates it).
func TestParseUsage(t *testing.T) {
	tests := []struct {
		name string
		json string
		want providers.Usage
	}{
		{"chat", `{"prompt_tokens":11,"completion_tokens":8,"total_tokens":19}`, providers.Usage{Prompt: 11, Completion: 8, Reported: true}},
		{"details", `{"prompt_tokens":11,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}`,
			providers.Usage{Prompt: 11, Completion: 8, Cached: 4, Reasoning: 2, Reported: true}},
		{"null details", `{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null}}`,
			providers.Usage{Prompt: 1, Completion: 2, Reported: true}},
		{"responses names", `{"input_tokens":5,"output_tokens":6}`, providers.Usage{Prompt: 5, Completion: 6, Reported: true}},
		{"embeddings", `{"prompt_tokens":7,"total_tokens":7}`, providers.Usage{Prompt: 7, Reported: true}},
		{"not an object", `"lots"`, providers.Usage{}},
		{"empty object", `{}`, providers.Usage{}},
		{"negative", `{"prompt_tokens":-1,"completion_tokens":3}`, providers.Usage{}},
		{"string count", `{"prompt_tokens":4,"completion_tokens":"many"}`, providers.Usage{}},
		{"fraction", `{"prompt_tokens":4.5,"completion_tokens":3}`, providers.Usage{}},
		{"exponent", `{"prompt_tokens":1e3,"completion_tokens":3}`, providers.Usage{}},
		{"null count", `{"prompt_tokens":null,"completion_tokens":3}`, providers.Usage{}},
		{"bad cached", `{"prompt_tokens":4,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":-2}}`, providers.Usage{}},
		{"count past 2^64", `{"prompt_tokens":4,"output_tokens":20000000000000000000}`, providers.Usage{}},
		{"count of 2^64-1", `{"prompt_tokens":4,"completion_tokens":18446744073709551615}`, providers.Usage{Reported: true, Prompt: 4, Completion: 18446744073709551615}},
		{"the mock's bad usage", `{"prompt_tokens":-1,"completion_tokens":"many","total_tokens":null}`, providers.Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseUsage(tt.json); got != tt.want {
				t.Errorf("ParseUsage(%s) = %+v, want %+v", tt.json, got, tt.want)
			}
		})
	}
}

// FuzzParseUsage: on valid JSON, ParseUsage reads what the gjson walk it
// replaced (referenceUsage) reads, and usage is reported only when
// encoding/json reads the same counts as non-negative integers.
func FuzzParseUsage(f *testing.F) {
	for _, s := range []string{`{"prompt_tokens":11,"completion_tokens":8}`, `{"input_tokens":5,"output_tokens":6}`,
		`{"prompt_tokens":-1,"completion_tokens":"many"}`, `{"prompt_tokens":1e3}`, `{}`, `null`,
		`{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !rawjson.Valid([]byte(s), 64) {
			return // ParseUsage reads answers the gateway has validated
		}
		u := ParseUsage(s)
		if want := referenceUsage(gjson.Parse(s)); u != want {
			t.Fatalf("ParseUsage = %+v, the gjson reference %+v", u, want)
		}
		if !u.Reported {
			if u != (providers.Usage{}) {
				t.Fatalf("unreported usage with counts: %+v", u)
			}
			return
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return // gjson reads some inputs encoding/json refuses
		}
		for _, k := range []struct {
			names []string
			got   uint64
		}{{[]string{"prompt_tokens", "input_tokens"}, u.Prompt}, {[]string{"completion_tokens", "output_tokens"}, u.Completion}} {
			present := 0
			for _, name := range k.names {
				raw, ok := v[name]
				if !ok {
					continue
				}
				present++
				var n uint64
				if err := json.Unmarshal(raw, &n); err != nil {
					t.Fatalf("%s reported from %s, which is not a non-negative integer: %v", name, raw, err)
				}
				if present == 1 && n != k.got && !dupKeys(s) {
					t.Fatalf("%s = %d, encoding/json reads %s", name, k.got, raw)
				}
			}
		}
	})
}

// dupKeys reports whether s may repeat a key (the parsers disagree on which
// one wins): it names a count key twice.
func dupKeys(s string) bool {
	for _, k := range []string{"prompt_tokens", "input_tokens", "completion_tokens", "output_tokens"} {
		if strings.Count(s, k) > 1 {
			return true
		}
	}
	return strings.Contains(s, "prompt_tokens") && strings.Contains(s, "input_tokens") ||
		strings.Contains(s, "completion_tokens") && strings.Contains(s, "output_tokens")
}

// TestServiceTier: the service tier an answer reports (service_tier, on the
// body, on a stream's usage chunk, on a Responses terminal event) is read
// with its usage; tiers without a price of their own are the standard one.
func TestServiceTier(t *testing.T) {
	p, _ := New(Options{Name: "t", BaseURL: "http://h/v1"})
	usage := `"usage":{"prompt_tokens":3,"completion_tokens":1}`
	for _, tt := range []struct {
		name, body string
		want       pricing.ServiceTier
	}{
		{"flex", `{"object":"chat.completion","choices":[],"service_tier":"flex",` + usage + `}`, pricing.TierFlex},
		{"priority after usage", `{"object":"chat.completion","choices":[],` + usage + `,"service_tier":"priority"}`, pricing.TierPriority},
		{"default", `{"object":"chat.completion","choices":[],"service_tier":"default",` + usage + `}`, pricing.TierStandard},
		{"none", `{"object":"chat.completion","choices":[],` + usage + `}`, pricing.TierStandard},
		{"not a string", `{"object":"chat.completion","choices":[],"service_tier":1,` + usage + `}`, pricing.TierStandard},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, u, err := p.Response(nil, []byte(tt.body), &providers.Call{Endpoint: providers.Chat})
			if err != nil || u.Tier != tt.want || u.Prompt != 3 {
				t.Errorf("usage %+v err %v, want tier %v", u, err, tt.want)
			}
		})
	}
	t.Run("stream", func(t *testing.T) {
		s := p.Stream(&providers.Call{})
		defer s.Close()
		for _, ev := range []string{
			"data: {\"service_tier\":\"flex\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
			"data: {\"service_tier\":\"flex\",\"choices\":[]," + usage + "}\n\n",
			"data: [DONE]\n\n",
		} {
			if _, _, err := s.Event(nil, []byte(ev)); err != nil {
				t.Fatal(err)
			}
		}
		if u := s.Usage(); u.Tier != pricing.TierFlex || u.Prompt != 3 {
			t.Errorf("usage %+v", u)
		}
	})
}

// referenceUsage is ParseUsage as it was written over gjson (a lookup per
// member), kept as the reference of FuzzParseUsage and FuzzStream.
func referenceUsage(u gjson.Result) providers.Usage {
	if !u.IsObject() {
		return providers.Usage{}
	}
	out := providers.Usage{Reported: true}
	counted := false
	refCount := func(v gjson.Result, ok bool) (uint64, bool) {
		if v.Type != gjson.Number || strings.Trim(v.Raw, "0123456789") != "" {
			return 0, false
		}
		if _, err := strconv.ParseUint(v.Raw, 10, 64); err != nil {
			return 0, false // past 2^64-1, where gjson's Uint saturates
		}
		return v.Uint(), ok
	}
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens", "input_tokens":
			out.Prompt, out.Reported = refCount(v, out.Reported)
			counted = true
		case "completion_tokens", "output_tokens":
			out.Completion, out.Reported = refCount(v, out.Reported)
			counted = true
		case "prompt_tokens_details", "input_tokens_details":
			if c := v.Get("cached_tokens"); c.Exists() && c.Type != gjson.Null {
				out.Cached, out.Reported = refCount(c, out.Reported)
			}
		case "completion_tokens_details", "output_tokens_details":
			if r := v.Get("reasoning_tokens"); r.Exists() && r.Type != gjson.Null {
				out.Reasoning, out.Reported = refCount(r, out.Reported)
			}
		}
		return true
	})
	if !out.Reported || !counted {
		return providers.Usage{}
	}
	return out
}

// BenchmarkParseUsage reads a chat answer's usage object with cached and
// reasoning tokens. Expected: 0 allocs/op. The counts' digits are checked
// with a loop; strings.Trim with a cutset (which builds its set on each
// call) took 328-330 -> 268-273 ns/op here (2026-12-04, the bench machine,
// 3 runs each).
func BenchmarkParseUsage(b *testing.B) {
	raw := `{"prompt_tokens":1210,"completion_tokens":356,"total_tokens":1566,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":128}}`
	b.ReportAllocs()
	for b.Loop() {
		if u := ParseUsage(raw); u.Prompt != 1210 || u.Completion != 356 || u.Cached != 1024 || u.Reasoning != 128 {
			b.Fatalf("usage %+v", u)
		}
	}
}
