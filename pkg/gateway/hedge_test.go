package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/usage"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// closeRecorder is a loopback TCP proxy in front of an upstream that records
// connections the client (the gateway) closed while a request was waiting
// for its answer: the upstream had not sent a byte since the request.
type closeRecorder struct {
	url   string
	early atomic.Int64 // closed by the client with an answer pending

	mu    sync.Mutex
	conns []net.Conn // guarded by mu
	wg    sync.WaitGroup
}

func recordCloses(t *testing.T, upstreamURL string) *closeRecorder {
	t.Helper()
	ln := listen(t)
	target := strings.TrimSuffix(strings.TrimPrefix(upstreamURL, "http://"), "/v1")
	rc := &closeRecorder{url: "http://" + ln.Addr().String() + "/v1"}
	rc.wg.Add(1)
	go func() {
		defer rc.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rc.mu.Lock()
			rc.conns = append(rc.conns, c)
			rc.mu.Unlock()
			rc.wg.Add(1)
			go func() { defer rc.wg.Done(); rc.pipe(c, target) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		rc.mu.Lock()
		for _, c := range rc.conns {
			_ = c.Close()
		}
		rc.mu.Unlock()
		rc.wg.Wait()
	})
	return rc
}

func (rc *closeRecorder) pipe(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	var pending atomic.Bool // a request went up and no answer byte came back yet
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				pending.Store(false)
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				_ = c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			pending.Store(true)
			if _, err := up.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && pending.Load() {
				rc.early.Add(1)
			}
			break
		}
	}
	_ = up.Close()
	<-done
}

// hedgeSetup is a gateway whose model "hedged" has a slow first target
// (behind a close recorder) and a fast second one.
type hedgeSetup struct {
	r          *rig
	slow, fast *mockllm.Server
	rec        *closeRecorder
	reg        *prometheus.Registry
}

func newHedgeSetup(t *testing.T, slowLatency time.Duration, hedge string) *hedgeSetup {
	t.Helper()
	slow := mockllm.New(mockllm.Config{Latency: slowLatency})
	sln := listen(t)
	go func() { _ = slow.Serve(sln) }()
	t.Cleanup(func() { _ = slow.Shutdown() })
	rec := recordCloses(t, "http://"+sln.Addr().String()+"/v1")
	fast, fastURL := secondMock(t)
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		addProvider(c, "slow", rec.url)
		addProvider(c, "fast", fastURL)
		for i := len(c.Providers) - 2; i < len(c.Providers); i++ {
			c.Providers[i].Timeouts.FirstByte, c.Providers[i].Timeouts.Total = 10*time.Second, 10*time.Second
		}
		c.Models = append(c.Models, config.Model{Name: "hedged", Strategy: config.StrategyOrdered,
			Targets: []config.Target{{Provider: "slow", Model: "s"}, {Provider: "fast", Model: "f"}},
			Hedge:   config.Hedge{After: hedge}})
		c.ApplyDefaults()
	})
	reg := withMetrics(t, r)
	return &hedgeSetup{r: r, slow: slow, fast: fast, rec: rec, reg: reg}
}

// streamName names a subtest run with and without streaming.
func streamName(stream bool) string {
	if stream {
		return "stream"
	}
	return "non-stream"
}

func hedgedBody(stream bool) string {
	return strings.Replace(mockChat(stream, `{"chunks":4}`), `"mock-gpt"`, `"hedged"`, 1)
}

// call sends one request for the hedged model and checks the answer is
// complete.
func (h *hedgeSetup) call(t *testing.T, stream bool) (provider, attempts, hedged string) {
	t.Helper()
	resp := h.r.post("/v1/chat/completions", h.r.token(nil), hedgedBody(stream))
	if stream {
		chunks, done := decodeChunks(t, readEvents(t, resp.Body))
		resp.Body.Close()
		if resp.StatusCode != 200 || !done || len(chunks) == 0 {
			t.Fatalf("status %d, done %v, %d chunks", resp.StatusCode, done, len(chunks))
		}
	} else if body := readBody(t, resp); resp.StatusCode != 200 || !strings.Contains(string(body), `"choices"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	return resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Attempts"), resp.Header.Get("X-Tollgate-Hedged")
}

func TestHedgedRequests(t *testing.T) {
	tests := []struct {
		name         string
		slowLatency  time.Duration
		hedge        string
		wantProvider string
		wantAttempts string
		wantHedged   string
		wantFastHits int64
		wantCloses   int64 // first-target connections closed before the answer
	}{
		{"slow first target: the second wins", 3 * time.Second, "100ms", "fast", "2", "true", 1, 1},
		{"fast first target: no hedge", 0, "2s", "slow", "1", "false", 0, 0},
		{"hedging off by default: no second call", 300 * time.Millisecond, "", "slow", "1", "", 0, 0},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name+"/"+streamName(stream), func(t *testing.T) {
				h := newHedgeSetup(t, tt.slowLatency, tt.hedge)
				prov, attempts, hedged := h.call(t, stream)
				if prov != tt.wantProvider || attempts != tt.wantAttempts || hedged != tt.wantHedged {
					t.Errorf("provider %q, attempts %q, hedged %q; want %q, %q, %q", prov, attempts, hedged,
						tt.wantProvider, tt.wantAttempts, tt.wantHedged)
				}
				if n := h.fast.Stats().Chat; n != tt.wantFastHits {
					t.Errorf("second target called %d times, want %d", n, tt.wantFastHits)
				}
				if tt.wantCloses > 0 {
					testkit.Wait(t, 2*time.Second, "the losing call's connection to close", func() bool { return h.rec.early.Load() >= tt.wantCloses })
				}
				// A loser's connection is closed, never pooled: the next
				// request to the first target gets a working one.
				time.Sleep(50 * time.Millisecond)
				if n := h.rec.early.Load(); n != tt.wantCloses {
					t.Errorf("%d first-target connections closed before the answer, want %d", n, tt.wantCloses)
				}
				wantWon, wantStarted := 0.0, 0.0
				if tt.wantHedged == "true" {
					wantWon, wantStarted = 1, 1
				}
				for _, m := range []struct {
					event string
					want  float64
				}{{"started", wantStarted}, {"won", wantWon}, {"cancelled", wantWon}} {
					if got := counter(t, h.reg, "tollgate_hedges_total", map[string]string{"model": "hedged", "event": m.event}); got != m.want {
						t.Errorf("tollgate_hedges_total{event=%q} = %v, want %v", m.event, got, m.want)
					}
				}
			})
		}
	}
}

// TestMessagesDoesNotHedge: /v1/messages retries and falls back like chat
// but does not hedge (README: Hedged requests). To a model whose first
// target is slower than its hedge delay, chat starts a second call and
// /v1/messages waits for the first, with no x-tollgate-hedged header.
func TestMessagesDoesNotHedge(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(streamName(stream), func(t *testing.T) {
			h := newHedgeSetup(t, 300*time.Millisecond, "50ms")
			if prov, attempts, hedged := h.call(t, stream); prov != "fast" || attempts != "2" || hedged != "true" {
				t.Fatalf("chat: provider %q, attempts %q, hedged %q; want a hedge won by the second target", prov, attempts, hedged)
			}
			hits := h.fast.Stats().Chat
			body := fmt.Sprintf(`{"model":"hedged","max_tokens":16,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
			resp := h.r.post("/v1/messages", h.r.token(nil), body)
			if stream {
				events := readEvents(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || len(events) == 0 || !strings.Contains(events[len(events)-1].data, "message_stop") {
					t.Fatalf("status %d, %d events", resp.StatusCode, len(events))
				}
			} else if b := readBody(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"message"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if prov, attempts := resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Attempts"); prov != "slow" || attempts != "1" {
				t.Errorf("messages: provider %q, attempts %q; want the first target's answer, one attempt", prov, attempts)
			}
			if v, ok := resp.Header["X-Tollgate-Hedged"]; ok {
				t.Errorf("messages: x-tollgate-hedged %q, want no header", v)
			}
			if n := h.fast.Stats().Chat; n != hits {
				t.Errorf("messages called the second target %d times", n-hits)
			}
			if got := counter(t, h.reg, "tollgate_hedges_total", map[string]string{"model": "hedged", "event": "started"}); got != 1 {
				t.Errorf("tollgate_hedges_total{event=started} = %v, want 1 (the chat request's)", got)
			}
		})
	}
}

// TestHedgeLoserStopsGenerating: when the first call answers while the
// hedge has sent its header but not its first event, the hedge is
// cancelled: the upstream sees its stream cancelled, never completed.
func TestHedgeLoserStopsGenerating(t *testing.T) {
	// Both targets wait 600 ms before their first event; the hedge starts
	// 400 ms after the first call, so the first call answers first.
	h := newHedgeSetup(t, 0, "400ms")
	body := strings.Replace(hedgedBody(true), `{"chunks":4}`, `{"chunks":4,"first_chunk_delay_ms":600,"chunk_delay_ms":100}`, 1)
	resp := h.r.post("/v1/chat/completions", h.r.token(nil), body)
	chunks, done := decodeChunks(t, readEvents(t, resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || !done || len(chunks) == 0 {
		t.Fatalf("status %d, done %v", resp.StatusCode, done)
	}
	if p, hd, n := resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Hedged"), resp.Header.Get("X-Tollgate-Attempts"); p != "slow" || hd != "true" || n != "2" {
		t.Fatalf("provider %q hedged %q attempts %q; want the first target to win a hedged race of 2 calls", p, hd, n)
	}
	testkit.Wait(t, 3*time.Second, "the losing stream to be cancelled", func() bool { return h.fast.Stats().StreamsCancelled == 1 })
	if st := h.fast.Stats(); st.StreamsStarted != 1 || st.StreamsCompleted != 0 {
		t.Errorf("the losing stream: %+v, want started once and never completed", st)
	}
	for _, m := range []struct {
		event string
		want  float64
	}{{"started", 1}, {"won", 0}, {"cancelled", 1}} {
		if got := counter(t, h.reg, "tollgate_hedges_total", map[string]string{"model": "hedged", "event": m.event}); got != m.want {
			t.Errorf("tollgate_hedges_total{event=%q} = %v, want %v", m.event, got, m.want)
		}
	}
}

func TestHedgeBillsTheWinnerOnce(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(streamName(stream), func(t *testing.T) {
			slow := mockllm.New(mockllm.Config{Latency: 3 * time.Second})
			sln := listen(t)
			go func() { _ = slow.Serve(sln) }()
			t.Cleanup(func() { _ = slow.Shutdown() })
			_, fastURL := secondMock(t)
			a := newAcctRig(t, func(c *config.Config) {
				addProvider(c, "slow", "http://"+sln.Addr().String()+"/v1")
				addProvider(c, "fast", fastURL)
				c.Models = append(c.Models, config.Model{Name: "hedged", Strategy: config.StrategyOrdered,
					Targets: []config.Target{{Provider: "slow", Model: "s"}, {Provider: "fast", Model: "f"}},
					Hedge:   config.Hedge{After: "100ms"}})
				c.ApplyDefaults()
			})
			resp := a.post("/v1/chat/completions", a.token(nil), hedgedBody(stream))
			readBody(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			ev := a.events(t, 1)[0]
			if !ev.Hedged || ev.Attempts != 2 || ev.Deployment != "fast/f" || !slices.Equal(ev.Fallbacks, []string{"slow/s"}) ||
				ev.StatusCode != 200 || ev.PromptTokens == 0 || ev.Estimated {
				t.Errorf("event: hedged %v attempts %d deployment %q fallbacks %v status %d prompt %d estimated %v",
					ev.Hedged, ev.Attempts, ev.Deployment, ev.Fallbacks, ev.StatusCode, ev.PromptTokens, ev.Estimated)
			}
			// The loser is not billed: the stream holds exactly one event.
			time.Sleep(200 * time.Millisecond)
			info, err := a.js.Stream(t.Context(), usage.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if n := info.CachedInfo().State.Msgs; n != 1 {
				t.Errorf("%d usage events, want 1", n)
			}
		})
	}
}

// TestHedgeAfterP95: with hedge.after p95 there is no hedge until the
// target has answered 20 calls; then a call slower than its p95 is hedged.
func TestHedgeAfterP95(t *testing.T) {
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		addProvider(c, "fixed", fixedUpstream(t, benchCompletion))
		c.Providers[0].Timeouts.Total = 10 * time.Second
		c.Models = append(c.Models, config.Model{Name: "hedged", Strategy: config.StrategyOrdered,
			Targets: []config.Target{{Provider: "mock", Model: "m"}, {Provider: "fixed", Model: "f"}},
			Hedge:   config.Hedge{After: config.HedgeP95}})
		c.ApplyDefaults()
	})
	tok := r.token(nil)
	send := func(latencyMS string) (provider, hedged string) {
		resp := r.post("/v1/chat/completions", tok, strings.Replace(mockChat(false, `{"latency_ms":`+latencyMS+`}`), `"mock-gpt"`, `"hedged"`, 1))
		if body := readBody(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Hedged")
	}
	if prov, hedged := send("300"); prov != "mock" || hedged != "false" {
		t.Fatalf("without samples: provider %q hedged %q, want the first target and no hedge", prov, hedged)
	}
	for i := 0; i < 25; i++ {
		send("0")
	}
	if prov, hedged := send("1500"); prov != "fixed" || hedged != "true" {
		t.Fatalf("with samples: provider %q hedged %q, want the hedge to win", prov, hedged)
	}
}

// TestHedgeNoGoroutineLeak: every leg ends, winners and losers, streams
// and non-streams.
func TestHedgeNoGoroutineLeak(t *testing.T) {
	h := newHedgeSetup(t, 500*time.Millisecond, "50ms")
	h.call(t, false) // start the pools and server goroutines
	h.call(t, true)
	settle := func() int {
		time.Sleep(600 * time.Millisecond) // the slow mock's handlers wait out their latency
		return runtime.NumGoroutine()
	}
	before := settle()
	for i := 0; i < 10; i++ {
		h.call(t, i%2 == 0)
	}
	testkit.Wait(t, 5*time.Second, "the goroutines of the hedged calls to end", func() bool { return settle() <= before+2 })
	if n := counter(t, h.reg, "tollgate_hedges_total", map[string]string{"model": "hedged", "event": "cancelled"}); n != 12 {
		t.Errorf("%v losers cancelled, want 12", n)
	}
}
