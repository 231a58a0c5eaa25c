package bedrock

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// mockUpstream runs the mock LLM on a loopback port until the test ends and
// returns a client for it configured as the gateway's.
func mockUpstream(t *testing.T) (base string, hc *fasthttp.HostClient) {
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
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	hc = &fasthttp.HostClient{Addr: ln.Addr().String(), DisablePathNormalizing: true, ReadTimeout: 10 * time.Second}
	return "http://" + ln.Addr().String(), hc
}

// mockBody is a chat request whose documented mock prompt count is 8: two
// system words, three user words, three per message.
const mockBody = `{"model":"m","messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"hello there world"}]`

const toolFields = `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"input":{"type":"string"}}}}}],"tool_choice":"required"`

// send builds c, adds the mock's per-request headers (name, value pairs)
// and sends it as the gateway would.
func send(t *testing.T, p *Provider, hc *fasthttp.HostClient, c *providers.Call, stream bool, headers ...string) *fasthttp.Response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if err := p.Build(req, c); err != nil {
		t.Fatalf("build: %v", err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = stream
	if err := hc.Do(req, resp); err != nil {
		t.Fatalf("do: %v", err)
	}
	t.Cleanup(func() {
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	})
	return resp
}

func TestMockUnary(t *testing.T) {
	base, hc := mockUpstream(t)
	p := testProvider(t, base)
	tests := []struct {
		name, body   string
		headers      []string
		content      string // message content; "" for null
		toolArgs     string // tool_calls[0].function.arguments
		finish       string
		usage        providers.Usage
		noUsageField bool
	}{
		{"text", mockBody + `}`, []string{"X-Mock-Words", "3"}, "Tollgate mock answer", "", "stop",
			providers.Usage{Prompt: 8, Completion: 3, Reported: true}, false},
		{"tool call", mockBody + toolFields + `}`, []string{"X-Mock-Words", "2"}, "", `{"input":"Tollgate mock"}`, "tool_calls",
			providers.Usage{Prompt: 8, Completion: 2, Reported: true}, false},
		{"no usage", mockBody + `}`, []string{"X-Mock-Words", "1", "X-Mock-No-Usage", "1"}, "Tollgate", "", "stop", providers.Usage{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := chatCall(tc.body)
			resp := send(t, p, hc, c, false, tc.headers...)
			if resp.StatusCode() != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			out, u, err := p.Response(nil, resp.Body(), c)
			if err != nil {
				t.Fatalf("response: %v (%s)", err, resp.Body())
			}
			if u != tc.usage {
				t.Errorf("usage %+v, want %+v", u, tc.usage)
			}
			o := string(out)
			if !gjson.Valid(o) {
				t.Fatalf("invalid JSON %s", o)
			}
			msg := gjson.Get(o, "choices.0.message")
			if got := msg.Get("content"); (tc.content == "" && got.Type != gjson.Null) || (tc.content != "" && got.Str != tc.content) {
				t.Errorf("content %s, want %q", got.Raw, tc.content)
			}
			if tc.toolArgs != "" {
				call := msg.Get("tool_calls.0")
				if call.Get("function.name").Str != "get_weather" || call.Get("function.arguments").Str != tc.toolArgs ||
					!strings.HasPrefix(call.Get("id").Str, "tooluse_") || call.Get("type").Str != "function" {
					t.Errorf("tool call %s", call.Raw)
				}
			}
			if f := gjson.Get(o, "choices.0.finish_reason").Str; f != tc.finish {
				t.Errorf("finish %q, want %q", f, tc.finish)
			}
			if gjson.Get(o, "usage").Exists() == tc.noUsageField {
				t.Errorf("usage member: %s", o)
			}
		})
	}
}

func TestMockStream(t *testing.T) {
	base, hc := mockUpstream(t)
	p := testProvider(t, base)
	tests := []struct {
		name, body string
		headers    []string
		content    string // concatenated content deltas
		toolArgs   string // concatenated argument fragments of call 0
		finish     string
		usage      providers.Usage
	}{
		{"text with usage", mockBody + `,"stream":true,"stream_options":{"include_usage":true}}`, []string{"X-Mock-Chunks", "4"},
			"Tollgate mock answer alpha", "", "stop", providers.Usage{Prompt: 8, Completion: 4, Reported: true}},
		{"text without usage chunk", mockBody + `,"stream":true}`, []string{"X-Mock-Chunks", "2"},
			"Tollgate mock", "", "stop", providers.Usage{Prompt: 8, Completion: 2, Reported: true}},
		{"tool call", mockBody + toolFields + `,"stream":true,"stream_options":{"include_usage":true}}`, []string{"X-Mock-Chunks", "3"},
			"", `{"input":"Tollgate mock answer"}`, "tool_calls", providers.Usage{Prompt: 8, Completion: 3, Reported: true}},
		{"no usage", mockBody + `,"stream":true}`, []string{"X-Mock-Chunks", "1", "X-Mock-No-Usage", "1"},
			"Tollgate", "", "stop", providers.Usage{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := chatCall(tc.body)
			resp := send(t, p, hc, c, true, tc.headers...)
			if resp.StatusCode() != 200 || string(resp.Header.ContentType()) != "application/vnd.amazon.eventstream" {
				t.Fatalf("status %d, content type %s", resp.StatusCode(), resp.Header.ContentType())
			}
			s := p.Stream(c)
			defer s.Close()
			r := relay(s, resp.BodyStream())
			if r.state != providers.Done || r.err != nil || !r.done {
				t.Fatalf("state %d, err %v, complete %v\n%s", r.state, r.err, r.done, r.out)
			}
			if r.usage != tc.usage {
				t.Errorf("usage %+v, want %+v", r.usage, tc.usage)
			}
			data := checkSSE(t, r.out)
			checkContract(t, data, c.IncludeUsage)
			var content, args strings.Builder
			finish := ""
			for _, d := range data[:len(data)-1] {
				content.WriteString(gjson.Get(d, "choices.0.delta.content").Str)
				if tc.toolArgs != "" {
					tcall := gjson.Get(d, "choices.0.delta.tool_calls.0")
					if tcall.Exists() && tcall.Get("index").Int() != 0 {
						t.Errorf("tool call index %s", tcall.Raw)
					}
					if tcall.Get("id").Exists() && (tcall.Get("function.name").Str != "get_weather" || !strings.HasPrefix(tcall.Get("id").Str, "tooluse_")) {
						t.Errorf("tool call start %s", tcall.Raw)
					}
					args.WriteString(tcall.Get("function.arguments").Str)
				}
				if f := gjson.Get(d, "choices.0.finish_reason"); f.Type == gjson.String {
					finish = f.Str
				}
			}
			if content.String() != tc.content || args.String() != tc.toolArgs || finish != tc.finish {
				t.Errorf("content %q args %q finish %q; want %q %q %q", content.String(), args.String(), finish, tc.content, tc.toolArgs, tc.finish)
			}
		})
	}
}

func TestMockFailures(t *testing.T) {
	base, hc := mockUpstream(t)
	p := testProvider(t, base)
	streamBody := mockBody + `,"stream":true,"stream_options":{"include_usage":true}}`
	t.Run("cut", func(t *testing.T) {
		c := chatCall(streamBody)
		resp := send(t, p, hc, c, true, "X-Mock-Chunks", "5", "X-Mock-Cut-After", "2")
		s := p.Stream(c)
		defer s.Close()
		r := relay(s, resp.BodyStream())
		if r.state != providers.More || r.done || r.err == nil || errors.Is(r.err, providers.ErrMalformed) {
			t.Fatalf("state %d complete %v err %v", r.state, r.done, r.err)
		}
		if n := strings.Count(string(r.out), `"content":"`); n != 3 { // the role chunk and two words
			t.Errorf("%d content chunks before the cut:\n%s", n, r.out)
		}
	})
	t.Run("garbage frame", func(t *testing.T) {
		c := chatCall(streamBody)
		resp := send(t, p, hc, c, true, "X-Mock-Chunks", "5", "X-Mock-Garbage", "1", "X-Mock-Cut-After", "1")
		s := p.Stream(c)
		defer s.Close()
		r := relay(s, resp.BodyStream())
		if !errors.Is(r.err, providers.ErrMalformed) || r.done {
			t.Fatalf("err %v complete %v", r.err, r.done)
		}
		checkSSE(t, r.out)
	})
	t.Run("error event", func(t *testing.T) {
		c := chatCall(streamBody)
		resp := send(t, p, hc, c, true, "X-Mock-Chunks", "5", "X-Mock-Error-Event-After", "1")
		s := p.Stream(c)
		defer s.Close()
		r := relay(s, resp.BodyStream())
		var ue *providers.UpstreamError
		if r.state != providers.Failed || !errors.As(r.err, &ue) || ue.Message != "modelStreamErrorException: mock: injected stream error" {
			t.Fatalf("state %d err %v", r.state, r.err)
		}
	})
	t.Run("garbage body", func(t *testing.T) {
		c := chatCall(mockBody + `}`)
		resp := send(t, p, hc, c, false, "X-Mock-Garbage", "1")
		if _, _, err := p.Response(nil, resp.Body(), c); !errors.Is(err, providers.ErrMalformed) {
			t.Fatalf("err %v", err)
		}
	})
	for _, tc := range []struct {
		name   string
		stream bool
		status string
		typ    string
	}{
		{"throttled", false, "429", "ThrottlingException"},
		{"throttled stream", true, "429", "ThrottlingException"},
		{"unavailable", false, "503", "ServiceUnavailableException"},
		{"validation", true, "400", "ValidationException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := mockBody + `}`
			if tc.stream {
				body = streamBody
			}
			resp := send(t, p, hc, chatCall(body), tc.stream, "X-Mock-Status", tc.status)
			if got := resp.StatusCode(); got != int(gjson.Parse(tc.status).Int()) {
				t.Fatalf("status %d", got)
			}
			if typ := string(resp.Header.Peek("x-amzn-ErrorType")); !strings.HasPrefix(typ, tc.typ+":") {
				t.Errorf("x-amzn-ErrorType %q", typ)
			}
			var raw []byte
			if tc.stream {
				var err error
				if raw, err = io.ReadAll(resp.BodyStream()); err != nil {
					t.Fatal(err)
				}
			} else {
				raw = resp.Body()
			}
			if msg := p.ErrorMessage(raw); msg != "mock: injected error status" {
				t.Errorf("message %q from %s", msg, raw)
			}
		})
	}
	t.Run("unsigned", func(t *testing.T) {
		bp, err := New(Options{Name: "bearer", BaseURL: base, Region: "us-east-1", APIKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		resp := send(t, bp, hc, chatCall(mockBody+`}`), false)
		if resp.StatusCode() != 403 || bp.ErrorMessage(resp.Body()) != "Missing Authentication Token" {
			t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
	})
}
