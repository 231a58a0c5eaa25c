package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

// mockUpstream runs the mock LLM on a loopback port and returns a provider
// pointed at it and the client the gateway would use.
func mockUpstream(t *testing.T) (*Provider, *fasthttp.HostClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := mockllm.New(mockllm.Config{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	hc := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxIdemponentCallAttempts: 1}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return newTestProvider(t, "http://"+ln.Addr().String()), hc
}

// do builds and sends the call with the given X-Mock-* headers (name,
// value pairs). The response is released by the test's cleanup.
func do(t *testing.T, p *Provider, hc *fasthttp.HostClient, c *providers.Call, headers ...string) *fasthttp.Response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if err := p.Build(req, c); err != nil {
		t.Fatalf("build: %v", err)
	}
	if got := string(req.Header.Peek("x-goog-api-key")); got != "test-key" {
		t.Fatalf("api key header %q", got)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = c.Stream
	t.Cleanup(func() {
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	})
	if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("do: %v", err)
	}
	return resp
}

const (
	e2eChat  = `{"model":"gemini-2.5-flash","messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"hello there world"}]`
	e2eTools = `,"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"input":{"type":"string"}}}}},{"type":"function","function":{"name":"other"}}]`
	// e2ePrompt is the mock's count for e2eChat: 3 words + 3 for the user
	// content, 2 words + 3 for systemInstruction.
	e2ePrompt = 3 + 3 + 2 + 3
)

func TestEndToEndUnary(t *testing.T) {
	p, hc := mockUpstream(t)
	tests := []struct {
		name, body   string
		headers      []string
		content      string
		tool, finish string
		prompt       uint64
		completion   uint64
	}{
		{"text", e2eChat + `}`, []string{"X-Mock-Words", "5"}, "Tollgate mock answer alpha bravo", "", "stop", e2ePrompt, 5},
		{"required tool", e2eChat + e2eTools + `,"tool_choice":"required"}`, []string{"X-Mock-Words", "2"}, "", "lookup", "tool_calls", e2ePrompt, 2},
		{"named tool", e2eChat + e2eTools + `,"tool_choice":{"type":"function","function":{"name":"other"}}}`, []string{"X-Mock-Words", "1"}, "", "other", "tool_calls", e2ePrompt, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := callFor([]byte(tc.body), providers.Chat)
			resp := do(t, p, hc, c, tc.headers...)
			if resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			out, u, err := p.Response(nil, resp.Body(), c)
			if err != nil {
				t.Fatal(err)
			}
			var cc struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Model   string `json:"model"`
				Choices []struct {
					Message struct {
						Content   *string `json:"content"`
						ToolCalls []struct {
							ID       string `json:"id"`
							Function struct{ Name, Arguments string }
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					PromptTokens     uint64 `json:"prompt_tokens"`
					CompletionTokens uint64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(out, &cc); err != nil {
				t.Fatalf("decode %s: %v", out, err)
			}
			if !strings.HasPrefix(cc.ID, "chatcmpl-") || cc.Object != "chat.completion" || cc.Model != "gemini-2.5-flash" || len(cc.Choices) != 1 {
				t.Fatalf("unexpected answer %s", out)
			}
			ch := cc.Choices[0]
			if ch.FinishReason != tc.finish {
				t.Errorf("finish %q, want %q", ch.FinishReason, tc.finish)
			}
			if tc.tool == "" {
				if ch.Message.Content == nil || *ch.Message.Content != tc.content {
					t.Errorf("content %v, want %q", ch.Message.Content, tc.content)
				}
			} else {
				if len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != tc.tool || ch.Message.ToolCalls[0].ID != "call_0" {
					t.Fatalf("tool calls %+v, want one call of %s", ch.Message.ToolCalls, tc.tool)
				}
				if args := ch.Message.ToolCalls[0].Function.Arguments; !gjson.Valid(args) || gjson.Get(args, "input").Type != gjson.String {
					t.Errorf("arguments %q", args)
				}
			}
			if !u.Reported || u.Prompt != tc.prompt || u.Completion != tc.completion {
				t.Errorf("usage %+v, want prompt %d completion %d", u, tc.prompt, tc.completion)
			}
			if cc.Usage.PromptTokens != u.Prompt || cc.Usage.CompletionTokens != u.Completion {
				t.Errorf("body usage %+v differs from %+v", cc.Usage, u)
			}
		})
	}
}

func TestEndToEndFailures(t *testing.T) {
	p, hc := mockUpstream(t)
	c := callFor([]byte(e2eChat+`}`), providers.Chat)
	t.Run("status", func(t *testing.T) {
		resp := do(t, p, hc, c, "X-Mock-Status", "429")
		if resp.StatusCode() != fasthttp.StatusTooManyRequests {
			t.Fatalf("status %d", resp.StatusCode())
		}
		if msg := p.ErrorMessage(resp.Body()); msg != "mock: injected error status" {
			t.Errorf("message %q from %s", msg, resp.Body())
		}
		if gjson.GetBytes(resp.Body(), "error.status").Str != "RESOURCE_EXHAUSTED" {
			t.Errorf("body %s", resp.Body())
		}
	})
	t.Run("garbage", func(t *testing.T) {
		resp := do(t, p, hc, c, "X-Mock-Garbage", "1")
		if _, _, err := p.Response(nil, resp.Body(), c); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("err = %v, want ErrMalformed", err)
		}
	})
}

// streamResult is a translated stream as a client sees it.
type streamResult struct {
	content, finish string
	calls           map[int]*struct{ id, name, args string }
	usageChunks     int
	done            bool
	end             string
}

// relay reads the upstream body through the SSE reader and the provider's
// Stream, as the gateway does, and decodes the OpenAI chunks.
func relay(t *testing.T, p *Provider, resp *fasthttp.Response, c *providers.Call) (streamResult, providers.Stream) {
	t.Helper()
	s := p.Stream(c)
	t.Cleanup(s.Close)
	r := sse.NewReader(resp.BodyStream(), 4096, 1<<20)
	var out []byte
	res := streamResult{calls: map[int]*struct{ id, name, args string }{}}
loop:
	for {
		ev, ok := r.Next()
		if !ok {
			if err := r.Fill(); err != nil {
				res.end = "ended: complete=" + boolString(s.Complete())
				break
			}
			continue
		}
		var st providers.State
		var err error
		out, st, err = s.Event(out, ev)
		switch st {
		case providers.Done:
			res.end = "done"
			break loop
		case providers.Failed:
			res.end = "failed: " + err.Error()
			break loop
		}
	}
	checkChunks(t, out)
	for _, ev := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		data := strings.TrimPrefix(ev, "data: ")
		if data == "[DONE]" {
			res.done = true
			continue
		}
		if data == "" {
			continue
		}
		d := gjson.Parse(data)
		if d.Get("choices.#").Int() == 0 {
			res.usageChunks++
			continue
		}
		delta := d.Get("choices.0.delta")
		res.content += delta.Get("content").String()
		if f := d.Get("choices.0.finish_reason"); f.Type == gjson.String {
			res.finish = f.Str
		}
		delta.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			i := int(tc.Get("index").Int())
			if res.calls[i] == nil {
				res.calls[i] = &struct{ id, name, args string }{}
			}
			call := res.calls[i]
			call.id += tc.Get("id").String()
			call.name += tc.Get("function.name").String()
			call.args += tc.Get("function.arguments").String()
			return true
		})
	}
	return res, s
}

func TestEndToEndStream(t *testing.T) {
	p, hc := mockUpstream(t)
	usage := `,"stream":true,"stream_options":{"include_usage":true}}`
	tests := []struct {
		name, body  string
		headers     []string
		content     string
		tool        string
		finish, end string
		usageChunks int
		complete    bool
		completion  uint64
	}{
		{"text with usage", e2eChat + usage, []string{"X-Mock-Chunks", "4"}, "Tollgate mock answer alpha", "", "stop", "done", 1, true, 4},
		{"text without usage chunk", e2eChat + `,"stream":true}`, []string{"X-Mock-Chunks", "3"}, "Tollgate mock answer", "", "stop", "done", 0, true, 3},
		{"zero chunks", e2eChat + usage, []string{"X-Mock-Chunks", "0"}, "", "", "stop", "done", 1, true, 0},
		{"tool call", e2eChat + e2eTools + `,"tool_choice":"required"` + usage, []string{"X-Mock-Chunks", "3"}, "", "lookup", "tool_calls", "done", 1, true, 3},
		{"cut", e2eChat + usage, []string{"X-Mock-Chunks", "5", "X-Mock-Cut-After", "2"}, "Tollgate mock", "", "", "ended: complete=false", 0, false, 2},
		{"garbage", e2eChat + usage, []string{"X-Mock-Chunks", "5", "X-Mock-Garbage", "1", "X-Mock-Cut-After", "1"}, "Tollgate", "", "", "ended: complete=false", 0, false, 1},
		{"error event", e2eChat + usage, []string{"X-Mock-Chunks", "5", "X-Mock-Error-Event-After", "1"}, "Tollgate", "", "", "failed: mock: injected stream error", 0, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := callFor([]byte(tc.body), providers.Chat)
			resp := do(t, p, hc, c, tc.headers...)
			if resp.StatusCode() != fasthttp.StatusOK || string(resp.Header.ContentType()) != "text/event-stream" {
				t.Fatalf("status %d, content type %s", resp.StatusCode(), resp.Header.ContentType())
			}
			res, s := relay(t, p, resp, c)
			if res.end != tc.end || s.Complete() != tc.complete {
				t.Fatalf("end %q complete %v, want %q %v", res.end, s.Complete(), tc.end, tc.complete)
			}
			if res.content != tc.content || res.finish != tc.finish || res.usageChunks != tc.usageChunks || res.done != tc.complete {
				t.Errorf("content %q finish %q usage chunks %d done %v", res.content, res.finish, res.usageChunks, res.done)
			}
			if tc.tool != "" {
				call := res.calls[0]
				if len(res.calls) != 1 || call.name != tc.tool || call.id != "call_0" || gjson.Get(call.args, "input").Str != "Tollgate mock answer" {
					t.Errorf("tool calls %+v", res.calls)
				}
			}
			if u := s.Usage(); !u.Reported || u.Prompt != e2ePrompt || u.Completion != tc.completion {
				t.Errorf("usage %+v, want prompt %d completion %d", u, e2ePrompt, tc.completion)
			}
		})
	}
}

func TestEndToEndEmbeddings(t *testing.T) {
	p, hc := mockUpstream(t)
	tests := []struct {
		name, body string
		dims       int
		n          int
		b64        bool
	}{
		{"floats", `{"model":"gemini-embedding-001","input":["hello world","second"],"dimensions":8}`, 8, 2, false},
		{"base64", `{"model":"gemini-embedding-001","input":"hello world","dimensions":16,"encoding_format":"base64"}`, 16, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := callFor([]byte(tc.body), providers.Embeddings)
			resp := do(t, p, hc, c)
			if resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			out, _, err := p.Response(nil, resp.Body(), c)
			if err != nil {
				t.Fatal(err)
			}
			data := gjson.GetBytes(out, "data")
			if gjson.GetBytes(out, "object").Str != "list" || int(data.Get("#").Int()) != tc.n {
				t.Fatalf("answer %s", out)
			}
			// The mock gives a Gemini input the vector its OpenAI format
			// gives the same string: compare with /v1/embeddings.
			var want []float32
			openai := fasthttp.AcquireRequest()
			defer fasthttp.ReleaseRequest(openai)
			openai.SetRequestURI("http://mock/v1/embeddings")
			openai.Header.SetMethod("POST")
			openai.SetBodyString(`{"model":"x","input":"hello world","dimensions":` + itoa(tc.dims) + `}`)
			oresp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(oresp)
			if err := hc.Do(openai, oresp); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(gjson.GetBytes(oresp.Body(), "data.0.embedding").Raw), &want); err != nil {
				t.Fatal(err)
			}
			var got []float32
			if tc.b64 {
				got = decodeBase64Floats(t, data.Get("0.embedding").Str)
			} else if err := json.Unmarshal([]byte(data.Get("0.embedding").Raw), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.dims || len(want) != tc.dims {
				t.Fatalf("got %d values, want %d", len(got), tc.dims)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("value %d = %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// decodeBase64Floats reads OpenAI's base64 encoding of a float32 vector.
func decodeBase64Floats(t *testing.T, s string) []float32 {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw)%4 != 0 {
		t.Fatalf("bad base64 %q: %v", s, err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}
