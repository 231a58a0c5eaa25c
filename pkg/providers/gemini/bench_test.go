package gemini

import (
	"os"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// BenchmarkStreamChunk measures the translation of one typical Gemini text
// event (after the first). Expected: 0 allocs/op.
func BenchmarkStreamChunk(b *testing.B) {
	p, _ := New(Options{Name: "b", Now: fixedNow})
	first := []byte(`data: {"candidates": [{"content": {"parts": [{"text": "Hello"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"totalTokenCount": 8},"modelVersion": "gemini-2.5-flash","responseId": "abc"}` + "\r\n\r\n")
	ev := []byte(`data: {"candidates": [{"content": {"parts": [{"text": " there, how are you doing today? \"quoted\"\n"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 12,"totalTokenCount": 20},"modelVersion": "gemini-2.5-flash","responseId": "abc"}` + "\r\n\r\n")
	s := p.Stream(&providers.Call{Model: "m", IncludeUsage: true})
	defer s.Close()
	out, _, _ := s.Event(nil, first)
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	b.ResetTimer()
	for b.Loop() {
		out, _, _ = s.Event(out[:0], ev)
	}
}

// BenchmarkStreamToolCall measures an event carrying one function call.
func BenchmarkStreamToolCall(b *testing.B) {
	p, _ := New(Options{Name: "b", Now: fixedNow})
	ev := []byte(`data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris","unit":"c"}}}],"role":"model"},"index":0}],"modelVersion":"gemini-2.5-flash","responseId":"abc"}` + "\n\n")
	s := p.Stream(&providers.Call{Model: "m"})
	defer s.Close()
	out, _, _ := s.Event(nil, ev)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out, _, _ = s.Event(out[:0], ev)
	}
}

// BenchmarkBuild measures translating a request with tools and a schema.
func BenchmarkBuild(b *testing.B) {
	body, err := os.ReadFile("testdata/request/chat_tools.json")
	if err != nil {
		b.Fatal(err)
	}
	p, _ := New(Options{Name: "b", APIKey: "k"})
	c := &providers.Call{Endpoint: providers.Chat, Body: body, Model: "gemini-2.5-flash"}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	b.ReportAllocs()
	for b.Loop() {
		req.Reset()
		if err := p.Build(req, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResponse measures translating a non-stream answer with tool
// calls.
func BenchmarkResponse(b *testing.B) {
	body, err := os.ReadFile("testdata/response/chat_tool_calls.json")
	if err != nil {
		b.Fatal(err)
	}
	p, _ := New(Options{Name: "b", Now: fixedNow})
	c := &providers.Call{Endpoint: providers.Chat, Model: "m"}
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		out, _, _ = p.Response(out[:0], body, c)
	}
}
