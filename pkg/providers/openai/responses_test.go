package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

func responsesCall(body string, stream bool) *providers.Call {
	c := call(body, stream, false)
	c.Endpoint = providers.Responses
	return c
}

func TestResponsesBuild(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		body    string
		stream  bool
		rename  string
		clamp   int64
		wantURI string
		want    map[string]string // gjson path -> raw value ("" = absent)
	}{
		{"stream gets no stream_options", Options{Preset: "openai", APIKey: "k"}, `{"model":"m","input":"hi","stream":true}`, true, "", 0,
			"https://api.openai.com/v1/responses", map[string]string{"stream_options": "", "model": `"m"`}},
		{"client stream_options untouched", Options{Preset: "openai", APIKey: "k"}, `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false}}`, true, "", 0,
			"https://api.openai.com/v1/responses", map[string]string{"stream_options": `{"include_obfuscation":false}`}},
		{"model renamed", Options{BaseURL: "http://127.0.0.1:9/v1"}, `{"input":"hi","model":"alias"}`, false, "real-model", 0,
			"http://127.0.0.1:9/v1/responses", map[string]string{"model": `"real-model"`, "input": `"hi"`}},
		{"clamp existing max_output_tokens", Options{Preset: "openai"}, `{"model":"m","max_output_tokens":4000}`, false, "", 100,
			"https://api.openai.com/v1/responses", map[string]string{"max_output_tokens": "100", "max_completion_tokens": ""}},
		{"clamp adds max_output_tokens", Options{Preset: "openai"}, `{"model":"m","input":"x"}`, true, "", 50,
			"https://api.openai.com/v1/responses", map[string]string{"max_output_tokens": "50", "max_completion_tokens": "", "stream_options": ""}},
		{"azure v1 path, deployment in the body", Options{Azure: true, BaseURL: "https://x.openai.azure.com", APIVersion: "2024-10-21", APIKey: "az"},
			`{"model":"gpt","input":"hi"}`, false, "my-deployment", 0,
			"https://x.openai.azure.com/openai/v1/responses", map[string]string{"model": `"my-deployment"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Name = "t"
			p, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			c := responsesCall(tc.body, tc.stream)
			if tc.rename != "" {
				c.Model = tc.rename
				c.ModelJSON = []byte(`"` + tc.rename + `"`)
			}
			c.ClampMaxTokens = tc.clamp
			var req fasthttp.Request
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			if got := req.URI().String(); got != tc.wantURI {
				t.Errorf("URI = %s, want %s", got, tc.wantURI)
			}
			out := string(req.Body())
			if !gjson.Valid(out) {
				t.Fatalf("invalid JSON: %s", out)
			}
			for path, want := range tc.want {
				if got := gjson.Get(out, path).Raw; got != want {
					t.Errorf("%s = %s, want %s (body %s)", path, got, want, out)
				}
			}
		})
	}
}

func TestSpeaksResponses(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want bool
	}{
		{"openai preset", Options{Preset: "openai"}, true},
		{"vllm preset", Options{Preset: "vllm"}, true},
		{"no preset", Options{BaseURL: "http://127.0.0.1:9/v1"}, true},
		{"azure", Options{Azure: true, BaseURL: "https://x", APIVersion: "v"}, true},
		{"mistral preset", Options{Preset: "mistral"}, false},
		{"perplexity preset", Options{Preset: "perplexity"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.SpeaksResponses(); got != tc.want {
				t.Errorf("SpeaksResponses = %v, want %v", got, tc.want)
			}
		})
	}
	for name := range responsesPresets {
		if _, ok := Presets[name]; !ok {
			t.Errorf("responses preset %q is not a preset", name)
		}
	}
}

// splitEvents splits an SSE transcript into whole events.
func splitEvents(t testing.TB, b []byte) [][]byte {
	t.Helper()
	r := sse.NewReader(bytes.NewReader(b), 4<<10, 1<<20)
	var evs [][]byte
	for {
		ev, ok := r.Next()
		if ok {
			evs = append(evs, append([]byte(nil), ev...))
			continue
		}
		if err := r.Fill(); err != nil {
			return evs
		}
	}
}

// TestResponsesStreamGolden relays a recorded OpenAI Responses stream: every
// event passes through unchanged and the usage of response.completed is read.
func TestResponsesStreamGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/responses_stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := New(Options{Name: "t", Preset: "openai"})
	s := p.Stream(&providers.Call{Endpoint: providers.Responses, Stream: true})
	defer s.Close()
	var out []byte
	evs := splitEvents(t, raw)
	for i, ev := range evs {
		var st providers.State
		out, st, err = s.Event(out, ev)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if last := i == len(evs)-1; (st == providers.Done) != last {
			t.Fatalf("event %d: state %v", i, st)
		}
	}
	if !bytes.Equal(out, raw) {
		t.Errorf("relayed stream differs from the upstream's")
	}
	want := providers.Usage{Prompt: 1534, Completion: 75, Cached: 1280, Reasoning: 64, Reported: true}
	if u := s.Usage(); u != want || !s.Complete() {
		t.Errorf("usage %+v complete %v, want %+v", u, s.Complete(), want)
	}
	if got := s.(*responsesStream).NextSequence(); got != int64(len(evs)) {
		t.Errorf("next sequence %d, want %d", got, len(evs))
	}
}

func TestResponsesStreamEvents(t *testing.T) {
	const usage = `"usage":{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":3}}`
	full := providers.Usage{Prompt: 5, Completion: 7, Cached: 2, Reasoning: 3, Reported: true}
	tests := []struct {
		name     string
		ev       string
		state    providers.State
		passed   bool   // the event goes to the client
		errMsg   string // the UpstreamError's message
		usage    providers.Usage
		complete bool
		seq      int64
	}{
		{"delta", "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"delta\":\"hi\"}\n\n",
			providers.More, true, "", providers.Usage{}, false, 5},
		{"type not first, no event line", "data: {\"sequence_number\":9,\"type\":\"response.completed\",\"response\":{" + usage + "}}\n\n",
			providers.Done, true, "", full, true, 10},
		{"completed", "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":20,\"response\":{\"status\":\"completed\"," + usage + "}}\n\n",
			providers.Done, true, "", full, true, 21},
		{"incomplete", "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":3,\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}," + usage + "}}\n\n",
			providers.Done, true, "", full, true, 4},
		{"completed without usage", "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"usage\":null}}\n\n",
			providers.Done, true, "", providers.Usage{}, true, 2},
		{"failed", "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":6,\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}," + usage + "}}\n\n",
			providers.Failed, true, "boom", full, false, 7},
		{"error event", "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\",\"param\":null,\"sequence_number\":2}\n\n",
			providers.Failed, false, "slow down", providers.Usage{}, false, 3},
		{"chat-style error", "data: {\"error\":{\"message\":\"bad\"}}\n\n",
			providers.Failed, false, "bad", providers.Usage{}, false, 1},
		{"keep-alive comment", ": ping\n\n", providers.More, true, "", providers.Usage{}, false, 0},
		{"escaped key in text", "data: {\"type\":\"response.output_text.delta\",\"delta\":\"\\\"sequence_number\\\":77\",\"sequence_number\":8}\n\n",
			providers.More, true, "", providers.Usage{}, false, 9},
	}
	p, _ := New(Options{Name: "t", Preset: "openai"})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.Stream(&providers.Call{Endpoint: providers.Responses})
			defer s.Close()
			out, st, err := s.Event(nil, []byte(tc.ev))
			if st != tc.state {
				t.Errorf("state %v, want %v", st, tc.state)
			}
			if passed := string(out) == tc.ev; passed != tc.passed || (!passed && len(out) > 0) {
				t.Errorf("out %q, passed want %v", out, tc.passed)
			}
			var ue *providers.UpstreamError
			switch {
			case tc.errMsg == "" && err != nil:
				t.Errorf("err %v", err)
			case tc.errMsg != "" && (!errors.As(err, &ue) || ue.Message != tc.errMsg):
				t.Errorf("err %v, want message %q", err, tc.errMsg)
			}
			if s.Usage() != tc.usage || s.Complete() != tc.complete {
				t.Errorf("usage %+v complete %v, want %+v %v", s.Usage(), s.Complete(), tc.usage, tc.complete)
			}
			if got := s.(*responsesStream).NextSequence(); got != tc.seq {
				t.Errorf("next sequence %d, want %d", got, tc.seq)
			}
		})
	}
}

func TestResponsesStreamMalformed(t *testing.T) {
	p, _ := New(Options{Name: "t", Preset: "openai"})
	for _, ev := range []string{"data: {bad\n\n", "data: [1,2]\n\n", "data: " + strings.Repeat("[", 200) + "\n\n", "event: response.completed\ndata: nope\n\n"} {
		s := p.Stream(&providers.Call{Endpoint: providers.Responses})
		out, st, err := s.Event(nil, []byte(ev))
		if st != providers.Failed || !errors.Is(err, providers.ErrMalformed) || len(out) != 0 {
			t.Errorf("%q: state %v err %v out %q", ev, st, err, out)
		}
		s.Close()
	}
}

// FuzzResponsesStream checks the decoder against encoding/json on arbitrary
// events: it never panics, passes on or refuses each event whole, refuses
// exactly the data that is not a JSON object, and reads usage and the
// terminal state as encoding/json sees them.
func FuzzResponsesStream(f *testing.F) {
	raw, err := os.ReadFile("testdata/responses_stream.sse")
	if err != nil {
		f.Fatal(err)
	}
	for _, ev := range splitEvents(f, raw) {
		f.Add(ev)
	}
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"message\":\"x\",\"sequence_number\":1}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"message\":\"m\"}}}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.incomplete\",\"response\":{\"usage\":{\"input_tokens\":1e3}}}\n\n"))
	f.Add([]byte("data: {\"type\":\"resp\\u006fnse.completed\"}\n\n"))
	f.Add([]byte(": keep-alive\n\n"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte("data: {\"sequence_number\":99999999999999999999}\n\n"))
	p, _ := New(Options{Name: "t", Preset: "openai"})
	f.Fuzz(func(t *testing.T, ev []byte) {
		s := p.Stream(&providers.Call{Endpoint: providers.Responses})
		defer s.Close()
		out, st, err := s.Event(nil, ev)
		if len(out) != 0 && !bytes.Equal(out, ev) {
			t.Fatalf("event changed: %q -> %q", ev, out)
		}
		_, data, _ := sse.Parse(ev, nil)
		if len(data) == 0 || string(data) == "[DONE]" {
			return
		}
		var obj map[string]json.RawMessage
		isObject := json.Unmarshal(data, &obj) == nil && obj != nil && bytes.Count(data, []byte("[")) < 100 && bytes.Count(data, []byte("{")) < 100
		if isObject && errors.Is(err, providers.ErrMalformed) {
			t.Fatalf("valid object refused: %q", data)
		}
		if !json.Valid(data) && !errors.Is(err, providers.ErrMalformed) {
			t.Fatalf("invalid JSON accepted: %q", data)
		}
		if err != nil || !isObject {
			return
		}
		// The reference reads members by their exact names, as the wire
		// format means them (encoding/json's struct fields would also take
		// "usAge" for usage).
		var typ string
		var input, output uint64
		var usage map[string]json.RawMessage
		if t, ok := obj["type"]; ok && json.Unmarshal(t, &typ) != nil {
			return
		}
		var resp map[string]json.RawMessage
		if r, ok := obj["response"]; ok && json.Unmarshal(r, &resp) != nil {
			return
		}
		if u, ok := resp["usage"]; ok && json.Unmarshal(u, &usage) != nil {
			return
		}
		for k, dst := range map[string]*uint64{"input_tokens": &input, "output_tokens": &output} {
			if n, ok := usage[k]; ok && json.Unmarshal(n, dst) != nil {
				return // e.g. a number too large for uint64: gjson reads it differently
			}
		}
		terminal := typ == evCompleted || typ == evIncomplete
		if terminal && st != providers.Done && !bytes.Contains(ev, []byte("event:")) && bytes.Count(data, []byte(`"type"`)) == 1 {
			t.Fatalf("terminal %q not Done: %v", typ, st)
		}
		if terminal && usage != nil && st == providers.Done {
			u := s.Usage()
			if u.Prompt != input || u.Completion != output {
				t.Fatalf("usage %+v, encoding/json reads input %d, output %d", u, input, output)
			}
		}
	})
}

// BenchmarkResponsesStreamEvent relays the events of a recorded stream; the
// figure is per event (expected: 0 allocs/op).
func BenchmarkResponsesStreamEvent(b *testing.B) {
	raw, err := os.ReadFile("testdata/responses_stream.sse")
	if err != nil {
		b.Fatal(err)
	}
	evs := splitEvents(b, raw)
	p, _ := New(Options{Name: "t", Preset: "openai"})
	c := &providers.Call{Endpoint: providers.Responses, Stream: true}
	out := make([]byte, 0, 64<<10)
	var size int
	for _, ev := range evs {
		size += len(ev)
	}
	b.SetBytes(int64(size / len(evs)))
	b.ReportAllocs()
	s := p.Stream(c)
	for i := 0; b.Loop(); i++ {
		ev := evs[i%len(evs)]
		if i%len(evs) == 0 {
			s.Close()
			s = p.Stream(c)
			out = out[:0]
		}
		out, _, _ = s.Event(out, ev)
	}
	s.Close()
}

// BenchmarkResponsesStreamDelta is the common case: one text delta.
func BenchmarkResponsesStreamDelta(b *testing.B) {
	ev := []byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"item_id\":\"msg_68a1f0c3d9e08190b2c4e6a8f0b2d4f6\",\"output_index\":1,\"content_index\":0,\"delta\":\" help\",\"logprobs\":[],\"obfuscation\":\"xY3\"}\n\n")
	p, _ := New(Options{Name: "t", Preset: "openai"})
	s := p.Stream(&providers.Call{Endpoint: providers.Responses, Stream: true})
	defer s.Close()
	out := make([]byte, 0, 1024)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		out, _, _ = s.Event(out[:0], ev)
	}
}
