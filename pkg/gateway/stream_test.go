package gateway

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/valyala/fasthttp"

	"github.com/tollgate/tollgate/pkg/testkit"
)

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func streamBody(mock string) string {
	return `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"stream please"}],"mock":` + mock + `}`
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Delta        struct{ Content string } `json:"delta"`
		FinishReason *string                  `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct{ Message, Type, Code string } `json:"error"`
}

func decodeChunks(t *testing.T, events []sseEvent) (chunks []chunk, done bool) {
	t.Helper()
	for i, ev := range events {
		if ev.data == "[DONE]" {
			if i != len(events)-1 {
				t.Errorf("[DONE] is not the last event")
			}
			return chunks, true
		}
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("event %d is not JSON: %v: %s", i, err, ev.data)
		}
		chunks = append(chunks, c)
	}
	return chunks, false
}

func TestStreamRelayedChunkByChunk(t *testing.T) {
	r := newRig(t, nil)
	const n, delay = 6, 120 * time.Millisecond
	start := time.Now()
	resp := r.post("/v1/chat/completions", r.token(nil), streamBody(`{"chunks":6,"chunk_delay_ms":120}`))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readEvents(t, resp.Body)
	resp.Body.Close()
	chunks, done := decodeChunks(t, events)
	if !done {
		t.Fatal("no [DONE]")
	}
	var content []time.Time
	finishes := 0
	for i, c := range chunks {
		if c.ID != chunks[0].ID {
			t.Errorf("chunk %d id %q differs from %q", i, c.ID, chunks[0].ID)
		}
		if len(c.Choices) > 0 && c.Choices[0].FinishReason != nil {
			finishes++
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			content = append(content, events[i].at)
		}
		if c.Usage != nil {
			t.Error("usage chunk sent although the client did not ask for it")
		}
	}
	if len(content) != n || finishes != 1 {
		t.Fatalf("content chunks %d (want %d), finish reasons %d (want 1)", len(content), n, finishes)
	}
	// No buffering: every content chunk reached the client while the upstream
	// was still pacing the later ones, so arrivals are spread over the
	// stream instead of landing together at its end.
	spread := 0
	for i := 1; i < n; i++ {
		if content[i].Sub(content[i-1]) >= delay/2 {
			spread++
		}
	}
	// One gap may shrink when the machine stalls a goroutine; a buffering
	// relay would shrink them all.
	if spread < n-2 {
		t.Errorf("only %d of %d gaps between chunks kept the upstream's pacing: relayed in batches", spread, n-1)
	}
	if first := content[0].Sub(start); first > time.Duration(n-2)*delay {
		t.Errorf("first content chunk took %v: the stream was buffered", first)
	}
}

func TestStreamUsageOnlyWhenAsked(t *testing.T) {
	r := newRig(t, nil)
	resp := r.post("/v1/chat/completions", r.token(nil),
		`{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}],"mock":{"chunks":3}}`)
	chunks, done := decodeChunks(t, readEvents(t, resp.Body))
	resp.Body.Close()
	last := chunks[len(chunks)-1]
	if !done || last.Usage == nil || len(last.Choices) != 0 || last.Usage.CompletionTokens != 3 {
		t.Fatalf("want a final usage chunk with choices []: %+v", last)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	r := newRig(t, nil)
	resp := r.post("/v1/chat/completions", r.token(nil), streamBody(`{"chunks":200,"chunk_delay_ms":20}`))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for seen := 0; seen < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			seen++
		}
	}
	resp.Body.Close() // the client goes away at chunk 3 of 200
	testkit.Wait(t, 3*time.Second, "the mock to see the stream cancelled", func() bool {
		return r.mock.Stats().StreamsCancelled == 1
	})
	if s := r.mock.Stats(); s.StreamsCompleted != 0 || s.CompletionTokens >= 150 {
		t.Errorf("upstream kept generating after the client left: %+v", s)
	}
	testkit.Wait(t, 3*time.Second, "the request to be logged as client closed", func() bool {
		return strings.Contains(r.logs.String(), `"status":499`)
	})
}

func TestStreamFailuresAfterFirstByte(t *testing.T) {
	r := newRig(t, nil)
	tests := []struct {
		name, mock string
		headers    []string
		code       string
		content    int
		cfg        func(*config.Config) // a rig of its own with this change
	}{
		{"cut mid-stream", `{"chunks":10,"cut_after":3}`, nil, "upstream_stream_cut", 3, nil},
		{"garbage mid-stream", `{"chunks":10,"cut_after":2,"garbage":true}`, nil, "upstream_malformed", 2, nil},
		{"error event mid-stream", `{"chunks":10,"error_event_after":4}`, nil, "upstream_error", 4, nil},
		{"idle timeout", `{"chunks":4,"chunk_delay_ms":2500}`, nil, "upstream_timeout", 1, nil},
		// Only the idle timeout can end this stream: the first-byte and
		// total deadlines are far off, and the provider would go on.
		{"idle timeout alone", `{"chunks":3,"chunk_delay_ms":1200}`, nil, "upstream_timeout", 1, func(c *config.Config) {
			c.Providers[0].Timeouts.FirstByte, c.Providers[0].Timeouts.Idle, c.Providers[0].Timeouts.Total = 20*time.Second, 300*time.Millisecond, 30*time.Second
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := r
			if tc.cfg != nil {
				r = newRig(t, tc.cfg)
			}
			resp := r.post("/v1/chat/completions", r.token(nil), streamBody(tc.mock), tc.headers...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200 then an error event", resp.StatusCode)
			}
			chunks, done := decodeChunks(t, readEvents(t, resp.Body))
			resp.Body.Close()
			if done {
				t.Error("a failed stream must not end with [DONE]")
			}
			content := 0
			for _, c := range chunks[:len(chunks)-1] {
				if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					content++
				}
			}
			last := chunks[len(chunks)-1]
			if last.Error == nil || last.Error.Code != tc.code {
				t.Fatalf("last event = %+v (%+v), want an error event with code %s", last, last.Error, tc.code)
			}
			if content != tc.content {
				t.Errorf("content chunks before the error = %d, want %d", content, tc.content)
			}
		})
	}
}

// rawUpstream serves body as a 200 text/event-stream answer to any request.
func rawUpstream(t *testing.T, body string) string {
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

// TestStreamUpstreamShapes covers how a provider's stream can begin and end:
// a failure before the first event is a plain HTTP error; a stream that ends
// after finish_reason without [DONE] is complete and nothing is appended.
func TestStreamUpstreamShapes(t *testing.T) {
	const (
		c1   = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n"
		stop = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	)
	tests := []struct {
		name, body string
		status     int
		code       string // error code, plain or in the last event
		events     int    // data events the client gets
	}{
		{"finish without done", c1 + stop, 200, "", 2},
		{"complete", c1 + stop + "data: [DONE]\n\n", 200, "", 3},
		{"keep-alive comments pass", ": ping\n\n" + c1 + ": ping\n\n" + stop + "data: [DONE]\n\n", 200, "", 3},
		{"garbage first", "this is not SSE\n", 502, "upstream_malformed", 0},
		{"invalid json first", "data: {oops\n\n", 502, "upstream_malformed", 0},
		{"error event first", "data: {\"error\":{\"message\":\"overloaded\"}}\n\n", 502, "upstream_error", 0},
		{"empty body", "", 502, "upstream_stream_cut", 0},
		{"cut after a chunk", c1, 200, "upstream_stream_cut", 2},
		{"invalid json later", c1 + "data: {oops\n\n", 200, "upstream_malformed", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigFor(t, nil, rawUpstream(t, tc.body), nil)
			resp := r.post("/v1/chat/completions", r.token(nil), streamBody(`{}`))
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.status, readBody(t, resp))
			}
			if tc.status != 200 {
				errorShape(t, readBody(t, resp), typeUpstream, tc.code)
				return
			}
			events := readEvents(t, resp.Body)
			resp.Body.Close()
			if len(events) != tc.events {
				t.Fatalf("got %d events, want %d: %+v", len(events), tc.events, events)
			}
			chunks, _ := decodeChunks(t, events)
			var code string
			if last := chunks[len(chunks)-1]; last.Error != nil {
				code = last.Error.Code
			}
			if code != tc.code {
				t.Errorf("error code = %q, want %q", code, tc.code)
			}
		})
	}
}

// acceptRequest accepts one connection on ln and reads a request from it:
// its head and its Content-Length body.
func acceptRequest(ln net.Listener) (net.Conn, *bufio.Reader, error) {
	c, err := ln.Accept()
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length: "); ok {
			fmt.Sscan(v, &n)
		}
		if line == "\r\n" {
			break
		}
	}
	if _, err := io.ReadFull(br, make([]byte, n)); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, br, nil
}

// writeCounter counts the writes to the connections it accepts.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, writes: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// SyscallConn keeps the client watch working on the counted connection.
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// TestStreamBurstWrittenTogether: events a provider sent together reach
// the client in a few writes, not in one write each, and none is held
// back while the provider is waited for: the provider sends the rest of
// the stream only once the client has read every event of the burst.
func TestStreamBurstWrittenTogether(t *testing.T) {
	const n = 200
	ln := listen(t)
	release := make(chan struct{})
	held := make(chan bool, 1)
	go func() {
		c, _, err := acceptRequest(ln)
		if err != nil {
			return
		}
		defer c.Close()
		var b strings.Builder
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := func(ev string) { fmt.Fprintf(&b, "%x\r\n%s\r\n", len(ev), ev) }
		for i := range n {
			chunk(fmt.Sprintf("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", i))
		}
		if _, err := io.WriteString(c, b.String()); err != nil {
			return
		}
		select {
		case <-release:
			held <- false
		case <-time.After(10 * time.Second):
			held <- true
			return
		}
		b.Reset()
		chunk("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		chunk("data: [DONE]\n\n")
		b.WriteString("0\r\n\r\n")
		_, _ = io.WriteString(c, b.String())
	}()
	gwln := &writeCounter{Listener: listen(t)}
	r := newRigOn(t, gwln, nil, "http://"+ln.Addr().String()+"/v1", nil)
	resp := r.post("/v1/chat/completions", r.token(nil), streamBody(`{}`))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for got := 0; got < n; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d of the burst's %d events: %v", got, n, err)
		}
		if strings.HasPrefix(line, "data: ") {
			if want := fmt.Sprintf(`"content":"w%d "`, got); !strings.Contains(line, want) {
				t.Fatalf("event %d is %q, want its content %s", got, line, want)
			}
			got++
		}
	}
	writes := gwln.writes.Load()
	close(release)
	if <-held {
		t.Fatal("the client got the burst only when the provider gave up: the relay held it waiting for more")
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), `"finish_reason":"stop"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of the stream %q, %v", rest, err)
	}
	// The burst is about 22 KB: written 512 bytes at first, then in
	// writes that double up to 4 KiB, and before each of the few socket
	// reads it takes, it needs about ten writes. One per event would be
	// 200.
	if writes > n/10 {
		t.Errorf("the gateway wrote the %d events of one burst in %d writes", n, writes)
	}
}

// TestClientDisconnectCancelsSlowUpstreamAtOnce: the provider is thinking
// (no chunk for many seconds) when the client leaves; the gateway must close
// the upstream connection at once, not at the provider's next chunk. The
// client's connection is new, or it has carried whole streams before (each
// stream's watch of the socket must end with it, so the next can begin).
func TestClientDisconnectCancelsSlowUpstreamAtOnce(t *testing.T) {
	for _, before := range []int{0, 2} {
		t.Run(fmt.Sprintf("after %d streams on the connection", before), func(t *testing.T) {
			testDisconnectAtOnce(t, before)
		})
	}
}

func testDisconnectAtOnce(t *testing.T, before int) {
	ln := listen(t)
	upstreamClosed := make(chan time.Time, 1)
	go func() {
		ev := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking\"},\"finish_reason\":null}]}\n\n"
		for i := 0; ; i++ {
			c, br, err := acceptRequest(ln)
			if err != nil {
				return
			}
			if i < before { // a whole answer
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n%sdata: [DONE]\n\n", ev)
				c.Close()
				continue
			}
			defer c.Close()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
			// Now think for a long time; a read returns when the gateway closes.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = br.ReadByte()
			upstreamClosed <- time.Now()
			return
		}
	}()
	cfgURL := "http://" + ln.Addr().String() + "/v1"
	r := newRigFor(t, nil, cfgURL, func(c *config.Config) {
		c.Providers[0].Timeouts.Idle = 30 * time.Second
		c.Providers[0].Timeouts.Total = 30 * time.Second
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	body := streamBody(`{}`)
	tok := r.token(nil)
	for i := 0; i <= before; i++ {
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tok, len(body), body)
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("request %d: status line %q, %v", i, line, err)
		}
		for i < before { // read the whole chunked answer
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if line == "0\r\n" {
				if _, err := br.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	}
	for { // the last stream's first event
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	left := time.Now()
	c.Close()
	select {
	case at := <-upstreamClosed:
		if d := at.Sub(left); d > 2*time.Second {
			t.Errorf("upstream closed %v after the client left", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the upstream connection stayed open after the client left")
	}
	testkit.Wait(t, 3*time.Second, "the request to be logged as client closed", func() bool {
		return strings.Contains(r.logs.String(), `"status":499`)
	})
}

// TestUpstreamHeaderLimit: an upstream answer's status line and headers
// must fit the connection's read buffer (upstreamReadBuf). Headers a little
// under it pass, stream and non-stream; over it the client gets a 502 that
// says so, not fasthttp's advice to raise a buffer size it cannot set.
func TestUpstreamHeaderLimit(t *testing.T) {
	const answer = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	const unary = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	for _, tc := range []struct {
		name   string
		header int // bytes of one X-Filler header value
		stream bool
		status int
	}{
		{"6 KiB stream", 6 << 10, true, 200},
		{"6 KiB unary", 6 << 10, false, 200},
		{"9 KiB stream", 9 << 10, true, 502},
		{"9 KiB unary", 9 << 10, false, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := listen(t)
			srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
				ctx.Response.Header.Set("X-Filler", strings.Repeat("f", tc.header))
				if tc.stream {
					ctx.SetContentType("text/event-stream")
					ctx.SetBodyString(answer)
					return
				}
				ctx.SetContentType("application/json")
				ctx.SetBodyString(unary)
			}}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Shutdown() })
			r := newRigFor(t, nil, "http://"+ln.Addr().String()+"/v1", nil)
			body := `{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}`
			if tc.stream {
				body = streamBody(`{}`)
			}
			resp := r.post("/v1/chat/completions", r.token(nil), body)
			got := readBody(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.status, got)
			}
			if tc.status == 200 {
				if !strings.Contains(string(got), `"hi"`) {
					t.Fatalf("answer lost: %s", got)
				}
				return
			}
			msg := errorShape(t, got, typeUpstream, "upstream_error")
			if !strings.Contains(msg, "headers over 8 KiB") {
				t.Errorf("message = %q, want it to name the 8 KiB header limit", msg)
			}
		})
	}
}
