package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/metrics"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// withMetrics swaps the rig's gateway for one recording metrics on reg.
func withMetrics(t *testing.T, r *rig) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Config: r.cfg, Verifier: r.gw.state.Load().verifier, Logger: r.gw.log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	r.gw, r.url = gw, "http://"+ln.Addr().String()
	return reg
}

// counter returns the value of the series of name with exactly labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				if h := m.GetHistogram(); h != nil {
					return float64(h.GetSampleCount())
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	if len(m.GetLabel()) != len(labels) {
		return false
	}
	for _, l := range m.GetLabel() {
		if labels[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

func TestMetricsAfterKnownTraffic(t *testing.T) {
	r := newRig(t, nil)
	reg := withMetrics(t, r)
	tok := r.token(nil)
	for i := 0; i < 3; i++ {
		readBody(t, r.post("/v1/chat/completions", tok, chatBody))
	}
	readBody(t, r.post("/v1/chat/completions", tok, mockChat(false, `{"status":500}`)))
	resp := r.post("/v1/chat/completions", tok, streamBody(`{"chunks":3}`))
	readEvents(t, resp.Body)
	resp.Body.Close()
	readBody(t, r.post("/v1/chat/completions", "", chatBody))
	chat := map[string]string{"model": "mock-gpt", "provider": "mock", "endpoint": "/v1/chat/completions"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for kk, vv := range chat {
			m[kk] = vv
		}
		return m
	}
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"successes", "tollgate_requests_total", with("status", "200"), 4},
		{"upstream failure", "tollgate_requests_total", with("status", "502"), 1},
		{"unauthenticated", "tollgate_requests_total", map[string]string{"model": "", "provider": "", "endpoint": "/v1/chat/completions", "status": "401"}, 1},
		{"duration histogram", "tollgate_request_duration_seconds", chat, 5},
		{"ttft of the stream", "tollgate_ttft_seconds", chat, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The stream's metrics are recorded when its body ends.
			testkit.Wait(t, 2*time.Second, tc.name, func() bool { return counter(t, reg, tc.metric, tc.labels) == tc.want })
		})
	}
}

// TestReloadUnderLoad: reloads while requests run lose none of them, a new
// model is served after the reload, and a bad config is refused.
func TestReloadUnderLoad(t *testing.T) {
	r := newRig(t, nil)
	tok := r.token(nil)
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp := r.post("/v1/chat/completions", tok, streamBody(`{"chunks":5,"chunk_delay_ms":2}`))
				events := readEvents(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || len(events) == 0 || events[len(events)-1].data != "[DONE]" {
					failures.Add(1)
				}
			}
		}()
	}
	v := r.gw.state.Load().verifier
	for i := 0; i < 20; i++ {
		cfg := *r.cfg
		cfg.Models = append(append([]config.Model(nil), r.cfg.Models...), config.Model{Name: "new-model", Type: "chat", Targets: []config.Target{{Provider: "mock", Model: "mock-gpt"}}})
		if err := r.gw.Reload(&cfg, v, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d requests failed during reloads", n)
	}
	resp := r.post("/v1/chat/completions", tok, `{"model":"new-model","messages":[{"role":"user","content":"x"}]}`)
	if b := readBody(t, resp); resp.StatusCode != 200 {
		t.Fatalf("new model after reload: %d %s", resp.StatusCode, b)
	}
	bad := *r.cfg
	bad.Models = []config.Model{{Name: "x", Targets: []config.Target{{Provider: "nope"}}}}
	if err := r.gw.Reload(&bad, v, nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("bad reload: %v", err)
	}
	if resp := r.post("/v1/chat/completions", tok, chatBody); resp.StatusCode != 200 {
		t.Fatalf("after a refused reload the old config must serve: %d", resp.StatusCode)
	}
}
