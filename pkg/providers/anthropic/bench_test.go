package anthropic

import (
	"path/filepath"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

const (
	benchStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
	benchText  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, \\\"world\\\"! Here is a typical chunk\\nof text.\"}}\n\n"
	benchArgs  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"San Fra\"}}\n\n"
)

// BenchmarkStreamChunk measures the translation of one Anthropic text
// delta into an OpenAI chunk. Expected: 0 allocs/op.
func BenchmarkStreamChunk(b *testing.B) {
	benchStream(b, benchText, "")
}

// BenchmarkStreamChunkToolArgs measures an input_json_delta. Expected: 0
// allocs/op.
func BenchmarkStreamChunkToolArgs(b *testing.B) {
	benchStream(b, benchArgs, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}}\n\n")
}

func benchStream(b *testing.B, event, setup string) {
	p := testProvider(b, "")
	s := p.Stream(&providers.Call{Model: "claude", IncludeUsage: true})
	defer s.Close()
	out, _, _ := s.Event(nil, []byte(benchStart))
	out, _, _ = s.Event(out, []byte(setup))
	ev := []byte(event)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		var st providers.State
		var err error
		out, st, err = s.Event(out[:0], ev)
		if err != nil || st != providers.More || len(out) == 0 {
			b.Fatalf("state %v err %v", st, err)
		}
	}
}

// BenchmarkNativeStreamEvent measures the pass-through of one event.
// Expected: 0 allocs/op.
func BenchmarkNativeStreamEvent(b *testing.B) {
	p := testProvider(b, "")
	s := p.NativeStream()
	defer s.Close()
	ev := []byte(benchText)
	var out []byte
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		out, _, _ = s.Event(out[:0], ev)
	}
}

// BenchmarkEncoderChunk measures the translation of one OpenAI content
// chunk into an Anthropic content_block_delta. Expected: 0 allocs/op.
func BenchmarkEncoderChunk(b *testing.B) {
	e := NewEncoder("claude-sonnet-4-5", "req_1")
	defer e.Release()
	ev := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello, \\\"world\\\"! Here is a typical chunk\\nof text.\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	out, _ := e.Event(nil, ev)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if out, err = e.Event(out[:0], ev); err != nil || len(out) == 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild measures the translation of a request with tools, tool
// calls and results (testdata/request/tools.json). The allocations are
// gjson's walk of the body and the parameter names kept for errors.
func BenchmarkBuild(b *testing.B) {
	p := testProvider(b, "")
	c := chatCall(readFile(b, filepath.Join("testdata", "request", "tools.json")))
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	b.SetBytes(int64(len(c.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Build(req, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResponse measures the translation of a message with text and
// two tool calls. Expected: 0 allocs/op.
func BenchmarkResponse(b *testing.B) {
	p := testProvider(b, "")
	body := readFile(b, filepath.Join("testdata", "response", "tool_use.json"))
	c := &providers.Call{Model: "claude"}
	var out []byte
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if out, _, err = p.Response(out[:0], body, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestToOpenAI measures the inbound translation of a Claude
// Code-like request with tool use and results.
func BenchmarkRequestToOpenAI(b *testing.B) {
	body := readFile(b, filepath.Join("testdata", "inbound", "tool_round_trip.json"))
	var out []byte
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if out, _, _, err = RequestToOpenAI(out[:0], body); err != nil {
			b.Fatal(err)
		}
	}
}
