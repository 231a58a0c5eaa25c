package mockllm_test

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// handlerCtx returns a request context for calling the handler directly.
func handlerCtx(body string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	return &ctx
}

// BenchmarkChatHandler measures the non-stream chat handler alone.
// Expected: 0 allocs/op.
func BenchmarkChatHandler(b *testing.B) {
	h := mockllm.New(mockllm.Config{}).Handler()
	ctx := handlerCtx(withFields(""))
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// BenchmarkStreamHandler50 measures the handler and the writing of a
// 50-chunk stream, framed and flushed per event as on a connection.
// Expected: 0 allocs/op.
func BenchmarkStreamHandler50(b *testing.B) {
	h := mockllm.New(mockllm.Config{Chunks: 50}).Handler()
	ctx := handlerCtx(withFields(`"stream":true,"stream_options":{"include_usage":true}`))
	bw := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
		if err := ctx.Response.Write(bw); err != nil {
			b.Fatal(err)
		}
	}
}

// inmemory serves a mock on an in-memory listener and returns a client
// dialing it.
func inmemory(b *testing.B, cfg mockllm.Config) *fasthttp.HostClient {
	ln := fasthttputil.NewInmemoryListener()
	srv := mockllm.New(cfg)
	go srv.Serve(ln) //nolint:errcheck // Shutdown below ends it
	b.Cleanup(func() { srv.Shutdown() })
	return &fasthttp.HostClient{
		Addr: "mock",
		Dial: func(string) (net.Conn, error) { return ln.Dial() },
	}
}

func benchRoundTrip(b *testing.B, c *fasthttp.HostClient, body string, minBody int) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://mock/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(req, resp); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode() != fasthttp.StatusOK || len(resp.Body()) < minBody {
			b.Fatalf("status %d, %d bytes", resp.StatusCode(), len(resp.Body()))
		}
	}
}

// BenchmarkChatRoundTrip is one non-stream chat request and answer over an
// in-memory connection, client included.
func BenchmarkChatRoundTrip(b *testing.B) {
	benchRoundTrip(b, inmemory(b, mockllm.Config{}), withFields(""), 200)
}

// BenchmarkStreamRoundTrip50 is one 50-chunk stream over an in-memory
// connection, client included.
func BenchmarkStreamRoundTrip50(b *testing.B) {
	benchRoundTrip(b, inmemory(b, mockllm.Config{Chunks: 50}), withFields(`"stream":true,"stream_options":{"include_usage":true}`), 50*150)
}
