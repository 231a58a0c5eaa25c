package bedrock

import (
	"bytes"
	"os"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkStreamChunk translates one text delta frame, the per-chunk hot
// path. Expected: 0 allocs/op.
func BenchmarkStreamChunk(b *testing.B) {
	p := testProvider(b, "")
	ev := eventFrame(b, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" the quick brown fox \"jumps\"\n"},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGH"}`)
	s := p.Stream(chatCall(`{}`))
	defer s.Close()
	dst, _, _ := s.Event(nil, eventFrame(b, "messageStart", `{"role":"assistant"}`))
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		dst, _, _ = s.Event(dst[:0], ev)
	}
}

// BenchmarkStreamChunkTool translates one tool-argument delta frame.
// Expected: 0 allocs/op.
func BenchmarkStreamChunkTool(b *testing.B) {
	p := testProvider(b, "")
	ev := eventFrame(b, "contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"city\": \"Par"}},"p":"abcdefghijklmnop"}`)
	s := p.Stream(chatCall(`{}`))
	defer s.Close()
	dst, _, _ := s.Event(nil, eventFrame(b, "contentBlockStart", `{"contentBlockIndex":1,"start":{"toolUse":{"name":"get_weather","toolUseId":"tooluse_1"}}}`))
	b.ReportAllocs()
	for b.Loop() {
		dst, _, _ = s.Event(dst[:0], ev)
	}
}

// loopReader serves the same bytes forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// BenchmarkFramerNext splits and verifies one frame (the AWS decoder's
// CRC and header checks included) per op.
func BenchmarkFramerNext(b *testing.B) {
	ev := eventFrame(b, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" the quick brown fox"},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGH"}`)
	var fr framer
	fr.reset(&loopReader{b: bytes.Repeat(ev, 64)})
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		for {
			if _, ok := fr.Next(); ok {
				break
			}
			if err := fr.Fill(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkBuild translates and signs a tool-calling request.
func BenchmarkBuild(b *testing.B) {
	body, err := os.ReadFile("testdata/request/tools_parallel.json")
	if err != nil {
		b.Fatal(err)
	}
	p := testProvider(b, "")
	c := chatCall(string(body))
	var req fasthttp.Request
	b.ReportAllocs()
	for b.Loop() {
		req.Reset()
		if err := p.Build(&req, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranslateRequest is BenchmarkBuild without the signature.
func BenchmarkTranslateRequest(b *testing.B) {
	body, err := os.ReadFile("testdata/request/tools_parallel.json")
	if err != nil {
		b.Fatal(err)
	}
	c := chatCall(string(body))
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = appendConverse(dst[:0], c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResponse translates a non-stream answer with text and tool calls.
func BenchmarkResponse(b *testing.B) {
	body, err := os.ReadFile("testdata/response/tool_use.json")
	if err != nil {
		b.Fatal(err)
	}
	p := testProvider(b, "")
	c := chatCall(`{}`)
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		if dst, _, err = p.Response(dst[:0], body, c); err != nil {
			b.Fatal(err)
		}
	}
}
