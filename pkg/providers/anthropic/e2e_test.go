package anthropic

import (
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

// upstream is the mock LLM on a loopback port and a client for it, as the
// gateway holds one per provider.
type upstream struct {
	p  *Provider
	hc *fasthttp.HostClient
}

func startMock(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := mockllm.New(mockllm.Config{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	addr := ln.Addr().String()
	return &upstream{
		p:  testProvider(t, "http://"+addr),
		hc: &fasthttp.HostClient{Addr: addr, ReadTimeout: 10 * time.Second},
	}
}

// do builds and sends an OpenAI chat body, with extra request headers
// (name, value pairs) for the mock's behaviour.
func (u *upstream) do(t *testing.T, body string, stream bool, headers ...string) *fasthttp.Response {
	t.Helper()
	c := chatCall([]byte(body))
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if err := u.p.Build(req, c); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = stream
	if err := u.hc.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	})
	return resp
}

// relay reads the streamed answer event by event through s, as the
// gateway does, until Done, Failed or the end of the body.
func relay(resp *fasthttp.Response, s providers.Stream) (out []byte, st providers.State, err, readErr error) {
	r := sse.NewReader(resp.BodyStream(), 4096, 1<<20)
	for {
		ev, ok := r.Next()
		if !ok {
			if readErr = r.Fill(); readErr != nil {
				return out, providers.More, nil, readErr
			}
			continue
		}
		out, st, err = s.Event(out, ev)
		if st != providers.More {
			return out, st, err, nil
		}
	}
}

const (
	e2eMessages = `"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"hello there world"}]`
	e2eTools    = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"input":{"type":"string"}}}}},{"type":"function","function":{"name":"get_time"}}]`
	// e2ePrompt is the mock's count: 2 + 3 words, 3 per message.
	e2ePrompt = 2 + 3 + 2*3
)

func TestMockNonStream(t *testing.T) {
	u := startMock(t)
	tests := []struct {
		name, body string
		headers    []string
		content    string
		tool       string
		finish     string
	}{
		{name: "text", body: `{"model":"claude",` + e2eMessages + `}`, headers: []string{"X-Mock-Words", "3"}, content: "Tollgate mock answer", finish: "stop"},
		{name: "body mock object", body: `{"model":"claude",` + e2eMessages + `,"mock":{"words":2}}`, content: "Tollgate mock", finish: "stop"},
		{name: "tool required", body: `{"model":"claude",` + e2eMessages + `,` + e2eTools + `,"tool_choice":"required"}`, headers: []string{"X-Mock-Words", "2"}, tool: "get_weather", content: "Tollgate mock", finish: "tool_calls"},
		{name: "tool named", body: `{"model":"claude",` + e2eMessages + `,` + e2eTools + `,"tool_choice":{"type":"function","function":{"name":"get_time"}}}`, headers: []string{"X-Mock-Words", "1"}, tool: "get_time", content: "Tollgate", finish: "tool_calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := u.do(t, tt.body, false, tt.headers...)
			if resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			out, usage, err := u.p.Response(nil, resp.Body(), chatCall([]byte(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			var c struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Choices []struct {
					Message struct {
						Content   *string `json:"content"`
						ToolCalls []struct {
							ID       string `json:"id"`
							Function struct {
								Name, Arguments string
							} `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					Prompt     uint64 `json:"prompt_tokens"`
					Completion uint64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(out, &c); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			words := uint64(len(strings.Fields(tt.content)))
			if !strings.HasPrefix(c.ID, "chatcmpl-msg_") || c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].FinishReason != tt.finish {
				t.Fatalf("completion %s", out)
			}
			if usage != (providers.Usage{Prompt: e2ePrompt, Completion: words, Reported: true}) || c.Usage.Prompt != e2ePrompt || c.Usage.Completion != words {
				t.Errorf("usage %+v, body %s", usage, out)
			}
			m := c.Choices[0].Message
			if tt.tool == "" {
				if m.Content == nil || *m.Content != tt.content {
					t.Errorf("content %v", m.Content)
				}
				return
			}
			var args map[string]string
			if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != tt.tool || json.Unmarshal([]byte(m.ToolCalls[0].Function.Arguments), &args) != nil || args["input"] != tt.content {
				t.Errorf("tool calls %+v", m.ToolCalls)
			}
		})
	}
}

func TestMockStream(t *testing.T) {
	u := startMock(t)
	tests := []struct {
		name, body   string
		headers      []string
		includeUsage bool
		content      string
		tool         string
		finish       string
	}{
		{name: "text with usage", body: `{"model":"claude","stream":true,"stream_options":{"include_usage":true},` + e2eMessages + `}`, headers: []string{"X-Mock-Chunks", "4"}, includeUsage: true, content: "Tollgate mock answer alpha", finish: "stop"},
		{name: "text without usage", body: `{"model":"claude","stream":true,` + e2eMessages + `}`, headers: []string{"X-Mock-Chunks", "2"}, content: "Tollgate mock", finish: "stop"},
		{name: "tool call", body: `{"model":"claude","stream":true,` + e2eMessages + `,` + e2eTools + `,"tool_choice":"required"}`, headers: []string{"X-Mock-Chunks", "3"}, tool: "get_weather", content: "Tollgate mock answer", finish: "tool_calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := u.do(t, tt.body, true, tt.headers...)
			if resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("status %d", resp.StatusCode())
			}
			s := u.p.Stream(chatCall([]byte(tt.body)))
			defer s.Close()
			out, st, err, readErr := relay(resp, s)
			if st != providers.Done || err != nil || readErr != nil || !s.Complete() {
				t.Fatalf("state %v err %v read %v complete %v", st, err, readErr, s.Complete())
			}
			words := uint64(len(strings.Fields(tt.content)))
			if got := s.Usage(); got != (providers.Usage{Prompt: e2ePrompt, Completion: words, Reported: true}) {
				t.Errorf("usage %+v", got)
			}
			res := checkOpenAIStream(t, out)
			if !res.done || res.finish != tt.finish || (res.usage != nil) != tt.includeUsage {
				t.Errorf("stream %+v", res)
			}
			if tt.tool == "" {
				if res.content != tt.content {
					t.Errorf("content %q, want %q", res.content, tt.content)
				}
				return
			}
			var args map[string]string
			if len(res.calls) != 1 || res.calls[0].name != tt.tool || json.Unmarshal([]byte(res.calls[0].args), &args) != nil || args["input"] != tt.content {
				t.Errorf("calls %+v", res.calls)
			}
		})
	}
}

func TestMockFailures(t *testing.T) {
	u := startMock(t)
	const body = `{"model":"claude",` + e2eMessages + `}`
	const streamBody = `{"model":"claude","stream":true,` + e2eMessages + `}`
	t.Run("injected status", func(t *testing.T) {
		for _, status := range []int{429, 500, 529} {
			resp := u.do(t, body, false, "X-Mock-Status", strconv.Itoa(status))
			if resp.StatusCode() != status || u.p.ErrorMessage(resp.Body()) != "mock: injected error status" {
				t.Errorf("status %d body %s", resp.StatusCode(), resp.Body())
			}
		}
	})
	t.Run("garbage body", func(t *testing.T) {
		resp := u.do(t, body, false, "X-Mock-Garbage", "1")
		if _, _, err := u.p.Response(nil, resp.Body(), chatCall([]byte(body))); !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("err %v, want ErrMalformed", err)
		}
	})
	t.Run("error event", func(t *testing.T) {
		resp := u.do(t, streamBody, true, "X-Mock-Error-Event-After", "2")
		s := u.p.Stream(chatCall([]byte(streamBody)))
		defer s.Close()
		out, st, err, _ := relay(resp, s)
		var ue *providers.UpstreamError
		if st != providers.Failed || !errors.As(err, &ue) || ue.Message != "overloaded_error: Overloaded" || s.Complete() {
			t.Errorf("state %v err %v complete %v", st, err, s.Complete())
		}
		if got := strings.Count(string(out), `"content":"`); got != 3 { // the role chunk and 2 words
			t.Errorf("%d content chunks before the error: %s", got, out)
		}
	})
	t.Run("cut", func(t *testing.T) {
		resp := u.do(t, streamBody, true, "X-Mock-Cut-After", "2")
		s := u.p.Stream(chatCall([]byte(streamBody)))
		defer s.Close()
		_, st, err, readErr := relay(resp, s)
		if st != providers.More || err != nil || readErr == nil {
			t.Errorf("state %v err %v read %v complete %v", st, err, readErr, s.Complete())
		}
		if s.Complete() {
			t.Errorf("a cut stream is complete")
		}
		if u := s.Usage(); u.Prompt != e2ePrompt || u.Completion != 0 {
			t.Errorf("usage %+v: input from message_start only", u)
		}
	})
	t.Run("garbage stream", func(t *testing.T) {
		resp := u.do(t, streamBody, true, "X-Mock-Garbage", "1")
		s := u.p.Stream(chatCall([]byte(streamBody)))
		defer s.Close()
		_, st, _, readErr := relay(resp, s)
		if st == providers.Done || s.Complete() || readErr == nil {
			t.Errorf("state %v complete %v read %v", st, s.Complete(), readErr)
		}
	})
}

// post sends a built request to the mock, as the gateway sends a
// translated or native request.
func (u *upstream) post(t *testing.T, req *fasthttp.Request, stream bool) *fasthttp.Response {
	t.Helper()
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = stream
	if err := u.hc.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	})
	return resp
}

// inboundBody is an Anthropic SDK request: a system prompt of 2 words and
// a user message of 3, so the mock counts 2+3 words and 3 per message.
const inboundBody = `{"model":"claude-sonnet-4-5","max_tokens":200,"system":[{"type":"text","text":"Be terse."}],` +
	`"messages":[{"role":"user","content":[{"type":"text","text":"hello there world"}]}]`

// TestMockInbound serves Anthropic-format requests from the mock's OpenAI
// endpoint: RequestToOpenAI, then ResponseFromOpenAI or the Encoder.
func TestMockInbound(t *testing.T) {
	u := startMock(t)
	tests := []struct {
		name, extra string
		stream      bool
		text        string
		tool        string
		stop        string
	}{
		{name: "text", extra: `,"mock":{"words":3}`, text: "Tollgate mock answer", stop: "end_turn"},
		{name: "tool", extra: `,"tools":[{"name":"lookup","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}`, tool: "lookup", stop: "tool_use"},
		{name: "stream text", extra: `,"stream":true`, stream: true, text: "Tollgate mock answer alpha", stop: "end_turn"},
		{name: "stream tool", extra: `,"stream":true,"tools":[{"name":"lookup","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"lookup"}`, stream: true, tool: "lookup", stop: "tool_use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, model, stream, err := RequestToOpenAI(nil, []byte(inboundBody+tt.extra+"}"))
			if err != nil || model != "claude-sonnet-4-5" || stream != tt.stream {
				t.Fatalf("translate: %v %q %v", err, model, stream)
			}
			req := fasthttp.AcquireRequest()
			defer fasthttp.ReleaseRequest(req)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI("http://" + u.hc.Addr + "/v1/chat/completions")
			req.Header.SetContentType("application/json")
			req.Header.Set("X-Mock-Chunks", "4")
			req.SetBody(body)
			resp := u.post(t, req, tt.stream)
			if resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			if !tt.stream {
				out, err := ResponseFromOpenAI(nil, resp.Body(), model)
				if err != nil {
					t.Fatal(err)
				}
				var m struct {
					Content []struct {
						Type, Text, Name string
						Input            json.RawMessage
					}
					StopReason string `json:"stop_reason"`
					Usage      struct {
						Input int `json:"input_tokens"`
					}
				}
				if err := json.Unmarshal(out, &m); err != nil || len(m.Content) != 1 || m.StopReason != tt.stop || m.Usage.Input != e2ePrompt {
					t.Fatalf("message %s (%v)", out, err)
				}
				if c := m.Content[0]; tt.tool == "" && c.Text != tt.text || tt.tool != "" && (c.Name != tt.tool || !json.Valid(c.Input)) {
					t.Errorf("content %+v", c)
				}
				return
			}
			e := NewEncoder(model, "req_1")
			defer e.Release()
			r := sse.NewReader(resp.BodyStream(), 4096, 1<<20)
			var out []byte
			for !e.Closed() {
				ev, ok := r.Next()
				if !ok {
					if err := r.Fill(); err != nil {
						t.Fatalf("read: %v", err)
					}
					continue
				}
				if out, err = e.Event(out, ev); err != nil {
					t.Fatal(err)
				}
			}
			res := checkAnthropicStream(t, out)
			if res.stop != tt.stop || res.input != e2ePrompt || res.output != 4 {
				t.Errorf("result %+v", res)
			}
			if tt.tool == "" && res.text != tt.text || tt.tool != "" && (len(res.tools) != 1 || res.tools[0].name != tt.tool) {
				t.Errorf("result %+v", res)
			}
		})
	}
}

// TestMockNative passes Anthropic requests through to the mock's Messages
// endpoint unchanged but for the model.
func TestMockNative(t *testing.T) {
	u := startMock(t)
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "message", true: "stream"}[stream], func(t *testing.T) {
			body := []byte(inboundBody + `,"stream":` + strconv.FormatBool(stream) + `}`)
			m := gjsonGet(body, "model")
			req := fasthttp.AcquireRequest()
			defer fasthttp.ReleaseRequest(req)
			if err := u.p.BuildNative(req, body, "claude-upstream", m.Raw, m.Index, nil); err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Mock-Chunks", "3")
			resp := u.post(t, req, stream)
			if resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			want := providers.Usage{Prompt: e2ePrompt, Completion: 3, Reported: true}
			if !stream {
				a, err := providers.ScanAnswer(resp.Body(), "content")
				if got := UsageOf(a.Usage); err != nil || got != want || gjsonGet(resp.Body(), "model").Str != "claude-upstream" {
					t.Errorf("usage %+v (%v) body %s", got, err, resp.Body())
				}
				return
			}
			s := u.p.NativeStream()
			defer s.Close()
			out, st, err, readErr := relay(resp, s)
			if st != providers.Done || err != nil || readErr != nil || !s.Complete() || s.Usage() != want {
				t.Fatalf("state %v err %v read %v complete %v usage %+v", st, err, readErr, s.Complete(), s.Usage())
			}
			if !strings.HasPrefix(string(out), "event: message_start\n") || !strings.HasSuffix(string(out), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
				t.Errorf("events not passed through: %s", out)
			}
		})
	}
}
