package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// startProxy serves a proxy to upstream on a loopback port and returns its URL.
func startProxy(t *testing.T, upstream string) string {
	t.Helper()
	p, err := newProxy(upstream, 64)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.ShutdownWithContext(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
	})
	return "http://" + ln.Addr().String()
}

// fakeUpstream answers by path; ack and gone connect it to the stream tests.
type fakeUpstream struct {
	ack  chan struct{} // closed by the test once it read the first event
	gone chan struct{} // closed when a client of /endless went away
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/echo":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Up", "yes")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Saw-Custom", r.Header.Get("X-Custom"))
		w.Header().Set("X-Saw-Keep-Alive", r.Header.Get("Keep-Alive"))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	case "/status":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"error":{"message":"busy"}}`)
	case "/lockstep":
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-f.ack:
			_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
		case <-time.After(5 * time.Second):
			_, _ = io.WriteString(w, "data: {\"error\":\"first event never reached the client\"}\n\n")
		}
	case "/endless":
		w.Header().Set("Content-Type", "text/event-stream")
		defer close(f.gone)
		for {
			_, _ = io.WriteString(w, "data: {\"n\":0}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// readEvent reads one SSE event (up to its blank line).
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v (so far %q)", err, ev.String())
		}
		if line == "\n" {
			return ev.String()
		}
		ev.WriteString(line)
	}
}

func TestProxy(t *testing.T) {
	f := &fakeUpstream{ack: make(chan struct{}), gone: make(chan struct{})}
	up := httptest.NewServer(f)
	defer up.Close()
	proxyURL := startProxy(t, up.URL)
	client := &http.Client{Timeout: 10 * time.Second}
	big := bytes.Repeat([]byte(`{"k":"0123456789abcdef"},`), 4000) // 100 KB: several relay reads

	t.Run("non-stream body and headers", func(t *testing.T) {
		req, _ := http.NewRequest("POST", proxyURL+"/echo", bytes.NewReader(big))
		req.Header.Set("X-Custom", "1")
		req.Header.Set("Keep-Alive", "300")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.StatusCode != 200 || !bytes.Equal(got, big):
			t.Fatalf("status %d, body of %d bytes, want %d", resp.StatusCode, len(got), len(big))
		case resp.ContentLength != int64(len(big)) || len(resp.TransferEncoding) != 0:
			t.Fatalf("content length %d, transfer encoding %v: want a fixed length", resp.ContentLength, resp.TransferEncoding)
		case resp.Header.Get("X-Up") != "yes" || resp.Header.Get("Content-Type") != "application/json":
			t.Fatalf("upstream headers not relayed: %v", resp.Header)
		case resp.Header.Get("X-Saw-Custom") != "1":
			t.Fatal("request header not forwarded")
		case resp.Header.Get("X-Saw-Keep-Alive") != "" || resp.Header.Get("Keep-Alive") != "":
			t.Fatalf("hop-by-hop header forwarded: %v", resp.Header)
		}
	})

	t.Run("chunked request body", func(t *testing.T) {
		resp, err := client.Post(proxyURL+"/echo", "application/json", io.MultiReader(bytes.NewReader(big))) // unknown length: chunked
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if !bytes.Equal(got, big) {
			t.Fatalf("echoed %d bytes, want %d", len(got), len(big))
		}
	})

	t.Run("error status relayed", func(t *testing.T) {
		resp, err := client.Post(proxyURL+"/status", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || string(got) != `{"error":{"message":"busy"}}` {
			t.Fatalf("status %d body %q", resp.StatusCode, got)
		}
	})

	t.Run("stream relayed event by event", func(t *testing.T) {
		// The upstream sends its second event only after the client got the
		// first: a proxy that buffers cannot pass.
		resp, err := client.Post(proxyURL+"/lockstep", "application/json", strings.NewReader(`{"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("status %d content type %q", resp.StatusCode, ct)
		}
		br := bufio.NewReader(resp.Body)
		if ev := readEvent(t, br); ev != "data: {\"n\":1}\n" {
			t.Fatalf("first event %q", ev)
		}
		close(f.ack)
		if ev := readEvent(t, br); ev != "data: {\"n\":2}\n" {
			t.Fatalf("second event %q", ev)
		}
		if ev := readEvent(t, br); ev != "data: [DONE]\n" {
			t.Fatalf("last event %q", ev)
		}
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Fatalf("after [DONE]: %q, %v", rest, err)
		}
	})

	t.Run("client gone closes upstream", func(t *testing.T) {
		resp, err := client.Post(proxyURL+"/endless", "application/json", strings.NewReader(`{"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		readEvent(t, br)
		readEvent(t, br)
		_ = resp.Body.Close() // mid-stream: closes the connection
		select {
		case <-f.gone:
		case <-time.After(5 * time.Second):
			t.Fatal("upstream still streaming 5s after the client left")
		}
	})
}

func TestProxyUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()
	resp, err := http.Post(startProxy(t, dead)+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
}

func TestNewProxyErrors(t *testing.T) {
	for _, tc := range []struct{ name, upstream string }{
		{"no scheme", "127.0.0.1:9999"},
		{"bad scheme", "ftp://127.0.0.1:9999"},
		{"no host", "http://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newProxy(tc.upstream, 1); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

// BenchmarkProxy measures client -> proxy -> upstream on in-memory
// connections; "direct" is the same client and upstream without the proxy,
// so the proxy's own cost is the difference.
func BenchmarkProxy(b *testing.B) {
	chat := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}]}`)
	event := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	upLn := fasthttputil.NewInmemoryListener()
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if !bytes.HasSuffix(ctx.Path(), []byte("/stream")) {
			ctx.SetContentType("application/json")
			ctx.SetBody(chat)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for range 50 {
				_, _ = w.Write(event)
				if w.Flush() != nil {
					return
				}
			}
			_, _ = w.WriteString("data: [DONE]\n\n")
		})
	}}
	go func() { _ = up.Serve(upLn) }()
	defer upLn.Close()

	p, err := newProxy("http://upstream", 64)
	if err != nil {
		b.Fatal(err)
	}
	p.client.Dial = func(string) (net.Conn, error) { return upLn.Dial() }
	pLn := fasthttputil.NewInmemoryListener()
	go func() { _ = p.server().Serve(pLn) }()
	defer pLn.Close()

	for _, target := range []struct {
		name string
		ln   *fasthttputil.InmemoryListener
	}{{"direct", upLn}, {"proxied", pLn}} {
		for _, path := range []string{"/v1/chat/completions", "/v1/chat/completions/stream"} {
			name := target.name + "/json"
			if strings.HasSuffix(path, "stream") {
				name = target.name + "/sse-50-chunks"
			}
			b.Run(name, func(b *testing.B) {
				c := &fasthttp.HostClient{Addr: "bench", Dial: func(string) (net.Conn, error) { return target.ln.Dial() }}
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI("http://bench" + path)
				req.Header.SetMethod("POST")
				req.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 || len(resp.Body()) < len(chat) {
						b.Fatalf("status %d body %d bytes err %v", resp.StatusCode(), len(resp.Body()), err)
					}
				}
			})
		}
	}
}
