package loadgen

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// upstream is a tiny fake OpenAI server on loopback with correct and
// deliberately broken answers, chosen by path.
type upstream struct {
	srv   *httptest.Server
	count atomic.Int64

	mu       sync.Mutex // guards arrivals
	arrivals []time.Time
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("/chat/{case}", u.chat)
	mux.HandleFunc("/emb/{case}", u.embeddings)
	mux.HandleFunc("/stream/{case}", u.stream)
	mux.HandleFunc("/slowstream", u.slowStream)
	u.srv = httptest.NewServer(u.counting(mux))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) counting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.count.Add(1)
		u.mu.Lock()
		u.arrivals = append(u.arrivals, time.Now())
		u.mu.Unlock()
		// With the body read, the server notices a client hanging up and
		// cancels r.Context().
		_, _ = io.Copy(io.Discard, r.Body)
		h.ServeHTTP(w, r)
	})
}

func (u *upstream) url(path string) string { return u.srv.URL + path }

const chatOK = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"mock-gpt",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`

func (u *upstream) chat(w http.ResponseWriter, r *http.Request) {
	switch r.PathValue("case") {
	case "ok":
		writeJSON(w, 200, chatOK)
	case "slow":
		select {
		case <-time.After(40 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		writeJSON(w, 200, chatOK)
	case "stall":
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
			return
		}
		writeJSON(w, 200, chatOK)
	case "empty":
		writeJSON(w, 200, strings.Replace(chatOK, "hello there", "", 1))
	case "nocontent":
		writeJSON(w, 200, `{"id":"x","choices":[]}`)
	case "badjson":
		writeJSON(w, 200, `{"id":"x","choices":[{"message":{"content":"hi"}`)
	case "429":
		writeJSON(w, 429, `{"error":{"message":"slow down","type":"rate_limit","param":null,"code":null}}`)
	case "500":
		writeJSON(w, 500, `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)
	case "302":
		w.Header().Set("Location", "/chat/ok")
		w.WriteHeader(302)
	case "hangup":
		hangUp(w)
	}
}

func (u *upstream) embeddings(w http.ResponseWriter, r *http.Request) {
	dims := 8
	vec := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = strconv.FormatFloat(float64(i)/10-0.3, 'f', -1, 64)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	b64 := func(n int) string {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)))
		}
		return `"` + base64.StdEncoding.EncodeToString(b) + `"`
	}
	body := func(embs ...string) string {
		var items []string
		for i, e := range embs {
			items = append(items, fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":%s}`, i, e))
		}
		return `{"object":"list","data":[` + strings.Join(items, ",") + `],"model":"mock-embed","usage":{"prompt_tokens":3,"total_tokens":3}}`
	}
	switch r.PathValue("case") {
	case "ok":
		writeJSON(w, 200, body(vec(dims), vec(dims)))
	case "base64":
		writeJSON(w, 200, body(b64(dims)))
	case "short":
		writeJSON(w, 200, body(vec(dims), vec(dims-1)))
	case "strings":
		writeJSON(w, 200, body(`["a","b","c","d","e","f","g","h"]`))
	case "none":
		writeJSON(w, 200, body())
	}
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// hangUp closes the connection without answering.
func hangUp(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

func (u *upstream) stream(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("case")
	var transcript string
	switch name {
	case "cut":
		transcript = goodStream(3)[:200]
	case "json":
		writeJSON(w, 200, goodStream(3))
		return
	default:
		i, _ := strconv.Atoi(name)
		transcript = sseCases()[i].stream
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	for ev := range strings.SplitAfterSeq(transcript, "\n\n") {
		_, _ = w.Write([]byte(ev))
		w.(http.Flusher).Flush()
	}
	if name == "cut" {
		hangUp(w) // no terminating chunk: the body is cut
	}
}

// slowStream sends 100 content chunks 50 ms apart.
func (u *upstream) slowStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	for i := range 100 {
		_, _ = w.Write([]byte(sseChunk("chatcmpl-1", "", "w"+strconv.Itoa(i)+" ", "")))
		w.(http.Flusher).Flush()
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
}

// run runs cfg with test defaults and fails on a configuration error.
func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	if cfg.Body == nil {
		cfg.Body = []byte(`{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}`)
	}
	if cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return r
}

func onlyKind(t *testing.T, r *Report, want string, n int64) {
	t.Helper()
	if want == "ok" {
		if r.Successes != n || r.Errors != 0 {
			t.Fatalf("successes %d errors %v, want %d successes", r.Successes, r.ErrorsByKind, n)
		}
		return
	}
	if r.Successes != 0 || r.ErrorsByKind[want] != n || r.Errors != n {
		t.Fatalf("successes %d errors %v, want %d %s", r.Successes, r.ErrorsByKind, n, want)
	}
}

func TestValidationKinds(t *testing.T) {
	u := newUpstream(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	_ = closed.Close()

	type tc struct {
		name string
		cfg  Config
		want string
	}
	cases := []tc{
		{"chat ok", Config{URL: u.url("/chat/ok")}, "ok"},
		{"chat empty content", Config{URL: u.url("/chat/empty")}, "empty_content"},
		{"chat no choices", Config{URL: u.url("/chat/nocontent")}, "empty_content"},
		{"chat bad json", Config{URL: u.url("/chat/badjson")}, "bad_json"},
		{"status 429", Config{URL: u.url("/chat/429")}, "status_4xx"},
		{"status 500", Config{URL: u.url("/chat/500")}, "status_5xx"},
		{"status 302", Config{URL: u.url("/chat/302")}, "status_other"},
		{"server hangs up", Config{URL: u.url("/chat/hangup")}, "closed"},
		{"timeout", Config{URL: u.url("/chat/stall"), Timeout: 100 * time.Millisecond}, "timeout"},
		{"connection refused", Config{URL: "http://" + deadAddr + "/v1/chat/completions"}, "connect"},
		{"embeddings ok", Config{URL: u.url("/emb/ok"), Embeddings: true, Dims: 8}, "ok"},
		{"embeddings any dims", Config{URL: u.url("/emb/ok"), Embeddings: true}, "ok"},
		{"embeddings base64", Config{URL: u.url("/emb/base64"), Embeddings: true, Dims: 8}, "ok"},
		{"embeddings wrong dims", Config{URL: u.url("/emb/ok"), Embeddings: true, Dims: 9}, "bad_embedding"},
		{"embeddings short vector", Config{URL: u.url("/emb/short"), Embeddings: true, Dims: 8}, "bad_embedding"},
		{"embeddings not numbers", Config{URL: u.url("/emb/strings"), Embeddings: true, Dims: 8}, "bad_embedding"},
		{"embeddings no data", Config{URL: u.url("/emb/none"), Embeddings: true}, "bad_embedding"},
		{"stream cut", Config{URL: u.url("/stream/cut"), Stream: true, Chunks: 3}, "cut"},
		{"stream as json", Config{URL: u.url("/stream/json"), Stream: true, Chunks: 3}, "content_type"},
	}
	for i, sc := range sseCases() {
		body := []byte(`{"model":"mock-gpt","stream":true}`)
		if sc.usage {
			body = []byte(`{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true}}`)
		}
		cases = append(cases, tc{"stream " + sc.name, Config{URL: u.url("/stream/" + strconv.Itoa(i)), Body: body, Stream: true, Chunks: 3}, sc.want.String()})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Requests = 3
			c.cfg.Concurrency = 1
			r := run(t, c.cfg)
			onlyKind(t, r, c.want, 3)
			if c.want == "ok" && (r.Latency.Count != 3 || r.Latency.P50MS <= 0) {
				t.Fatalf("latency %+v", r.Latency)
			}
		})
	}
}

func TestStreamTTFC(t *testing.T) {
	u := newUpstream(t)
	r := run(t, Config{URL: u.url("/stream/0"), Stream: true, Chunks: 3, Requests: 5})
	onlyKind(t, r, "ok", 5)
	if r.TTFC == nil || r.TTFC.Count != 5 || r.TTFC.MaxMS > r.Latency.MaxMS || r.TTFC.P50MS <= 0 {
		t.Fatalf("ttfc %+v latency %+v", r.TTFC, r.Latency)
	}
}

func TestClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		requests int64 // exact measured requests; 0: only compare with the server
	}{
		{"count limit", Config{Concurrency: 4, Requests: 50}, 50},
		{"count limit after warmup", Config{Concurrency: 3, Requests: 20, Warmup: 100 * time.Millisecond}, 20},
		{"duration", Config{Concurrency: 2, Duration: 300 * time.Millisecond}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t)
			tc.cfg.URL = u.url("/chat/slow")
			r := run(t, tc.cfg)
			if r.Errors != 0 {
				t.Fatalf("errors %v", r.ErrorsByKind)
			}
			if tc.requests > 0 && r.Requests != tc.requests {
				t.Fatalf("requests %d, want %d", r.Requests, tc.requests)
			}
			if tc.cfg.Warmup == 0 && r.Requests != u.count.Load() {
				t.Fatalf("measured %d, server saw %d", r.Requests, u.count.Load())
			}
			if tc.cfg.Warmup > 0 && u.count.Load() <= r.Requests {
				t.Fatalf("server saw %d, want warm-up requests beyond %d", u.count.Load(), r.Requests)
			}
			if r.Latency.Count != int(r.Requests) || r.Latency.MinMS < 40 || r.RPS <= 0 {
				t.Fatalf("latency %+v rps %g", r.Latency, r.RPS)
			}
			if r.StatusCodes["200"] != r.Requests {
				t.Fatalf("status codes %v", r.StatusCodes)
			}
		})
	}
}

func TestOpenLoopRate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warmup time.Duration
	}{
		{"no warmup", 0},
		{"warmup", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t)
			t0 := time.Now()
			r := run(t, Config{URL: u.url("/chat/ok"), Rate: 200, Duration: 500 * time.Millisecond, Warmup: tc.warmup})
			if r.Open == nil || r.Open.Scheduled != 100 || r.Requests != 100 || r.Errors != 0 {
				t.Fatalf("scheduled %+v requests %d errors %v", r.Open, r.Requests, r.ErrorsByKind)
			}
			u.mu.Lock()
			arr := slices.Clone(u.arrivals)
			u.mu.Unlock()
			if want := 100 + int(tc.warmup.Seconds()*200); len(arr) != want {
				t.Fatalf("server saw %d requests, want %d", len(arr), want)
			}
			// Request k is due 5k ms after the start and never sent before,
			// so the k-th arrival cannot come earlier: the rate is never
			// exceeded, however slow the machine is.
			slices.SortFunc(arr, func(a, b time.Time) int { return a.Compare(b) })
			for k, at := range arr {
				if due := t0.Add(time.Duration(k) * 5 * time.Millisecond); at.Before(due) {
					t.Fatalf("arrival %d at +%v, before its due time +%v", k, at.Sub(t0), due.Sub(t0))
				}
			}
		})
	}
}

func TestOpenLoopDropped(t *testing.T) {
	u := newUpstream(t)
	// Every answer takes 40 ms, a request is due every 5 ms and only one may
	// be in flight: most are dropped.
	r := run(t, Config{URL: u.url("/chat/slow"), Rate: 200, MaxInflight: 1, Duration: 300 * time.Millisecond})
	if r.Open.Scheduled != 60 || r.Requests != 60 {
		t.Fatalf("scheduled %d requests %d", r.Open.Scheduled, r.Requests)
	}
	if r.ErrorsByKind["dropped"] < 40 || r.Successes < 1 || r.Successes+r.ErrorsByKind["dropped"] != 60 || r.Open.PeakInflight != 1 {
		t.Fatalf("successes %d errors %v peak %d", r.Successes, r.ErrorsByKind, r.Open.PeakInflight)
	}
}

func TestLatencyFromIntendedTime(t *testing.T) {
	u := newUpstream(t)
	cfg := Config{URL: u.url("/chat/ok"), Body: []byte(`{}`), Duration: time.Second, Timeout: time.Second}.withDefaults()
	uu, err := cfg.validate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(newTarget(uu, &cfg, 1), bufSize)
	due := time.Now().Add(-100 * time.Millisecond) // the scheduler ran late
	w.one(due, true)
	if len(w.rec.lat) != 1 || time.Duration(w.rec.lat[0]) < 100*time.Millisecond {
		t.Fatalf("latency %v, want at least the 100ms of lateness", w.rec.lat)
	}
	w.one(time.Now().Add(-2*time.Second), true) // already past its timeout
	if w.rec.kinds[kindTimeout] != 1 {
		t.Fatalf("kinds %v", w.rec.kinds)
	}
}

func TestHold(t *testing.T) {
	u := newUpstream(t)
	for _, tc := range []struct {
		name                      string
		path                      string
		open, completed, failures int64
	}{
		{"slow streams stay open", "/slowstream", 5, 0, 0},
		{"fast streams complete", "/stream/0", 0, 5, 0},
		{"broken streams fail", "/stream/cut", 0, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := run(t, Config{URL: u.url(tc.path), Stream: true, Chunks: 3, Hold: 5, Duration: 500 * time.Millisecond})
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("hold of 500ms took %v", took)
			}
			h := r.Hold
			if h == nil || h.Requested != 5 || h.Established != 5 || h.OpenAtEnd != tc.open || h.Completed != tc.completed || r.Errors != tc.failures {
				t.Fatalf("hold %+v errors %v", h, r.ErrorsByKind)
			}
		})
	}
}

func TestRunCancel(t *testing.T) {
	u := newUpstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Run(ctx, Config{URL: u.url("/chat/ok"), Body: []byte(`{}`), Concurrency: 2, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancelled run took %v", took)
	}
	if r.Requests == 0 || r.Errors != 0 {
		t.Fatalf("requests %d errors %v", r.Requests, r.ErrorsByKind)
	}
}

func TestConfigErrors(t *testing.T) {
	base := Config{URL: "http://127.0.0.1:1/v1/chat/completions", Body: []byte(`{}`), Duration: time.Second}
	for _, tc := range []struct {
		name     string
		edit     func(*Config)
		loopback bool // want ErrNotLoopback
	}{
		{"remote ip", func(c *Config) { c.URL = "http://10.1.2.3:8080/v1/chat/completions" }, true},
		{"remote name", func(c *Config) { c.URL = "http://example.com/v1/chat/completions" }, true},
		{"unspecified address", func(c *Config) { c.URL = "http://0.0.0.0:8080/" }, true},
		{"bad scheme", func(c *Config) { c.URL = "ftp://127.0.0.1/" }, false},
		{"no body", func(c *Config) { c.Body = nil }, false},
		{"no duration", func(c *Config) { c.Duration = 0 }, false},
		{"stream embeddings", func(c *Config) { c.Stream, c.Embeddings = true, true }, false},
		{"hold without stream", func(c *Config) { c.Hold = 3 }, false},
		{"hold and rate", func(c *Config) { c.Hold, c.Rate, c.Stream = 3, 10, true }, false},
		{"huge concurrency", func(c *Config) { c.Concurrency = 1 << 20 }, false},
		{"bad header", func(c *Config) { c.Headers = [][2]string{{"X-A", "b\r\nX-Evil: 1"}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := Run(context.Background(), cfg)
			if err == nil {
				t.Fatal("want an error")
			}
			if got := errors.Is(err, ErrNotLoopback); got != tc.loopback {
				t.Fatalf("error %v: is ErrNotLoopback %v, want %v", err, got, tc.loopback)
			}
		})
	}
}

func TestCheckTarget(t *testing.T) {
	for _, tc := range []struct {
		host   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1", false, true},
		{"127.8.9.10", false, true},
		{"::1", false, true},
		{"localhost", false, true},
		{"LOCALHOST.", false, true},
		{"10.0.0.1", false, false},
		{"192.168.1.1", false, false},
		{"::", false, false},
		{"gateway.internal", false, false},
		{"10.0.0.1", true, true},
	} {
		t.Run(fmt.Sprintf("%s remote=%v", tc.host, tc.remote), func(t *testing.T) {
			err := CheckTarget(context.Background(), tc.host, tc.remote)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrNotLoopback) {
				t.Fatalf("err %v does not wrap ErrNotLoopback", err)
			}
		})
	}
}

// BenchmarkExchange measures one request and its validation on an
// in-memory connection to a fasthttp fake upstream, which shares the CPU.
func BenchmarkExchange(b *testing.B) {
	stream50 := []byte(goodStream(50))
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/chat" {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(chatOK)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBody(stream50)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer ln.Close()
	for _, tc := range []struct {
		name   string
		path   string
		stream bool
	}{
		{"chat", "/chat", false},
		{"stream-50-chunks", "/stream", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := Config{URL: "http://127.0.0.1" + tc.path, Body: []byte(`{"model":"m"}`), Duration: time.Second,
				Stream: tc.stream, Chunks: 50}.withDefaults()
			u, err := cfg.validate(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			t := newTarget(u, &cfg, 1)
			t.client.Dial = func(string) (net.Conn, error) { return ln.Dial() }
			w := newWorker(t, bufSize)
			b.ReportAllocs()
			for b.Loop() {
				if k, _, _ := w.exchange(time.Now()); k != kindOK {
					b.Fatalf("outcome %s", k)
				}
			}
		})
	}
}
