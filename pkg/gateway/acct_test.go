package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/revoke"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// acctRig is a rig with the whole accounting path: an embedded JetStream
// server, the publisher, the budget tracker and the budget consumer.
type acctRig struct {
	*rig
	js        jetstream.JetStream
	pub       *usage.Publisher
	tracker   *budget.Tracker
	revokedKV jetstream.KeyValue
	keys      *apikey.Store
	nc        *nats.Conn
	spoolDir  string
}

func newAcctRig(t *testing.T, mutate func(*config.Config)) *acctRig {
	t.Helper()
	ns := natstest.Start(t)
	nc := natstest.Connect(t, ns)
	ucfg := usage.Config{SpoolDir: t.TempDir()}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	var limits []budget.Limit
	captured := &config.Config{}
	r := newRig(t, func(c *config.Config) {
		if mutate != nil {
			mutate(c)
		}
		captured = c
	})
	if limits, err = budget.ParseLimits(captured.Budgets); err != nil {
		t.Fatal(err)
	}
	leases, err := budget.LeaseOptionsFrom(captured.Budget.Leases, nil) // on unless the test disables them, as the gateway program does (services/gateway, startAccounting)
	if err != nil {
		t.Fatal(err)
	}
	lkv, err := budget.EnsureLeaseBucket(ctx, js, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	tracker := budget.NewTracker(budget.TrackerOptions{Limits: limits, Leases: leases})
	ucfg.OnAck = tracker.OnAck
	pub, err := usage.NewPublisher(js, ucfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := budget.NewConsumer(js, budget.ConsumerOptions{Limits: limits, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context) error{
		func(ctx context.Context) error { return tracker.Run(ctx, kv) },
		func(ctx context.Context) error { return tracker.RunLeases(ctx, lkv) },
		pub.Run,
		consumer.Run,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	<-tracker.Ready()
	<-tracker.LeasesReady()
	rkv, err := revoke.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	revoked := revoke.NewWatcher(nil, nil)
	wg.Add(1)
	go func() { defer wg.Done(); _ = revoked.Run(ctx, rkv) }()
	<-revoked.Ready()
	keysKV, err := apikey.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	keys := apikey.NewWatcher(nil, nil)
	wg.Add(1)
	go func() { defer wg.Done(); _ = keys.Run(ctx, keysKV) }()
	<-keys.Ready()
	presence, err := ratelimit.Announce(ctx, wgGroup{&wg}, js, r.cfg.NATS.Replicas, r.cfg.RateLimit.PresenceTTL, slog.New(slog.DiscardHandler)) // as the gateway program does
	if err != nil {
		t.Fatal(err)
	}
	// Swap the rig's gateway for one with accounting, on the same config.
	gw, err := New(Options{Config: r.cfg, Verifier: r.gw.state.Load().verifier, Logger: r.gw.log, Accounting: Accounting{
		Publisher: pub, Journal: pub, Tracker: tracker, Prices: pricing.Default(),
		Limiter: ratelimit.New(ratelimit.Options{Share: presence.Share()}), Presence: presence, Estimator: tokenize.New(),
	}, Revocations: revoked, Keys: keys, Alert: func(subject string, data []byte) { _ = nc.Publish(subject, data) },
		Owners: r.gw.owners})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = gw.Shutdown(sctx)
	})
	r.gw, r.url = gw, "http://"+ln.Addr().String()
	return &acctRig{rig: r, js: js, pub: pub, tracker: tracker, revokedKV: rkv, keys: apikey.NewStore(keysKV, nil, nil), nc: nc, spoolDir: ucfg.SpoolDir}
}

// wgGroup runs a group's loops on a WaitGroup, dropping their errors.
type wgGroup struct{ wg *sync.WaitGroup }

func (g wgGroup) Go(f func() error) { g.wg.Go(func() { _ = f() }) }

// events reads every usage event in the stream, waiting until n arrived.
func (a *acctRig) events(t *testing.T, n int) []*usagev1.UsageEvent {
	t.Helper()
	return a.read(t, func(events, _ int) bool { return events >= n })
}

// read reads the usage stream's messages (batches, or legacy single
// events) in order until done(events, messages read so far) holds, and
// returns their events.
func (a *acctRig) read(t *testing.T, done func(events, msgs int) bool) []*usagev1.UsageEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*usagev1.UsageEvent
	c, err := a.js.OrderedConsumer(ctx, usage.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var b usagev1.UsageBatch
	for msgs := 0; !done(len(out), msgs); msgs++ {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("got %d events in %d messages: %v", len(out), msgs, err)
		}
		if err := usage.DecodeMessage(msg.Data(), &b); err != nil {
			t.Fatal(err)
		}
		want := usage.BatchMsgID(b.ProducerId, b.Seq)
		if b.ProducerId == "" {
			want = b.Events[0].EventId
		}
		if got := msg.Headers().Get("Nats-Msg-Id"); got != want {
			t.Errorf("Nats-Msg-Id %q, want %q", got, want)
		}
		out = append(out, b.Events...)
	}
	return out
}

func TestUsageEventNonStream(t *testing.T) {
	a := newAcctRig(t, nil)
	resp := a.post("/v1/chat/completions", a.token(nil), chatBody, "X-Request-Id", "bill-me-1")
	body := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out struct {
		Usage struct {
			PromptTokens     uint64 `json:"prompt_tokens"`
			CompletionTokens uint64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	ev := a.events(t, 1)[0]
	price, _ := pricing.Default().Lookup("mock-gpt")
	wantCost := price.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens})
	checks := []struct {
		name      string
		got, want any
	}{
		{"request id", ev.RequestId, resp.Header.Get("X-Request-Id")},
		{"subject", ev.Subject, "alice"},
		{"dept", ev.Dept, "research"},
		{"team", ev.Team, "nlp"},
		{"project", ev.Project, "bench"},
		{"requested model", ev.RequestedModel, "mock-gpt"},
		{"provider", ev.Provider, "mock"},
		{"status", ev.StatusCode, uint32(200)},
		{"endpoint", ev.Endpoint, "/v1/chat/completions"},
		{"prompt tokens as reported", ev.PromptTokens, out.Usage.PromptTokens},
		{"completion tokens as reported", ev.CompletionTokens, out.Usage.CompletionTokens},
		{"estimated", ev.Estimated, false},
		{"cost", ev.CostNanoUsd, wantCost},
		{"pricing version", ev.PricingVersion, pricing.Default().Version},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if wantCost <= 0 || ev.LatencyTotalUs == 0 || ev.Timestamp == 0 || !uuidV7(ev.EventId) {
		t.Errorf("cost %d latency %d ts %d id %q", wantCost, ev.LatencyTotalUs, ev.Timestamp, ev.EventId)
	}
}

func uuidV7(s string) bool { return len(s) == 36 && s[14] == '7' }

// TestUsageEventStreamWithoutClientUsage: the gateway asks the upstream for
// the usage chunk, bills from it, and hides it from a client that did not
// ask.
func TestUsageEventStreamWithoutClientUsage(t *testing.T) {
	a := newAcctRig(t, nil)
	resp := a.post("/v1/chat/completions", a.token(nil), streamBody(`{"chunks":5}`))
	events := readEvents(t, resp.Body)
	resp.Body.Close()
	for _, e := range events {
		if strings.Contains(e.data, `"usage":{`) {
			t.Fatalf("client got a usage chunk it did not ask for: %s", e.data)
		}
	}
	ev := a.events(t, 1)[0]
	if ev.Estimated || ev.CompletionTokens != 5 || !ev.Stream || ev.CostNanoUsd <= 0 {
		t.Errorf("event = estimated %v, completion %d, stream %v, cost %d", ev.Estimated, ev.CompletionTokens, ev.Stream, ev.CostNanoUsd)
	}
}

// TestUsageEventClientAbortIsEstimated: a client leaving mid-stream is
// billed for the prompt and the chunks delivered, counted by the tokenizer.
func TestUsageEventClientAbortIsEstimated(t *testing.T) {
	a := newAcctRig(t, nil)
	resp := a.post("/v1/chat/completions", a.token(nil), streamBody(`{"chunks":200,"chunk_delay_ms":20}`))
	br := bufio.NewReader(resp.Body)
	for seen := 0; seen < 5; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			seen++
		}
	}
	resp.Body.Close()
	ev := a.events(t, 1)[0]
	if !ev.Estimated || !ev.ClientAborted || ev.StatusCode != StatusClientClosed {
		t.Fatalf("event estimated %v aborted %v status %d", ev.Estimated, ev.ClientAborted, ev.StatusCode)
	}
	if ev.PromptTokens == 0 || ev.CompletionTokens < 3 || ev.CompletionTokens > 150 || ev.CostNanoUsd <= 0 {
		t.Errorf("estimated prompt %d completion %d cost %d", ev.PromptTokens, ev.CompletionTokens, ev.CostNanoUsd)
	}
}

// TestStreamBegunRecovered: a stream in flight has a begun record, with
// its progress, in the spool directory. A publisher opened on a copy of
// that directory (as a gateway SIGKILLed then would leave it) publishes
// the request's event, recovered and estimated, with the id, principal
// and route the request's own event carries when it ends.
func TestStreamBegunRecovered(t *testing.T) {
	a := newAcctRig(t, nil)
	resp := a.post("/v1/chat/completions", a.token(nil), streamBody(`{"chunks":40,"chunk_delay_ms":50}`))
	br := bufio.NewReader(resp.Body)
	text := 0                   // bytes of content the client got
	for seen := 0; seen < 25; { // 1.25 s in: a progress record was written
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			seen++
			var chunk struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(data), &chunk) == nil && len(chunk.Choices) > 0 {
				text += len(chunk.Choices[0].Delta.Content)
			}
		}
	}
	testkit.Wait(t, 5*time.Second, "the stream's progress in the begun file", func() bool {
		u, err := usage.ReadUnfinished(a.spoolDir)
		return err == nil && len(u) == 1 && u[0].CompletionTokens > 0
	})
	dir := t.TempDir()
	copySpool(t, a.spoolDir, dir)

	ns := natstest.Start(t)
	js2, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := usage.EnsureStream(ctx, js2, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	rec, err := usage.NewPublisher(js2, usage.Config{SpoolDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := rec.Stats().Recovered; n != 1 {
		t.Fatalf("recovered %d events, want 1", n)
	}
	ran := make(chan error, 1)
	go func() { ran <- rec.Run(ctx) }()
	b := &acctRig{js: js2}
	got := b.events(t, 1)[0]
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	own := a.events(t, 1)[0]
	if got.EventId != own.EventId || got.RequestId != own.RequestId || got.Dept != own.Dept || got.Team != own.Team ||
		got.Subject != own.Subject || got.Route != own.Route || got.Provider != own.Provider || got.ServedModel != own.ServedModel {
		t.Errorf("recovered event %v\ndoes not match the request's own %v", got, own)
	}
	if !got.Recovered || !got.Estimated || !got.Stream || own.Recovered {
		t.Errorf("recovered %v estimated %v stream %v; own recovered %v", got.Recovered, got.Estimated, got.Stream, own.Recovered)
	}
	// 25 chunks relayed when the copy was taken. The last progress (every
	// 500 ms from 500 ms after the first chunk) counted at least 8 of them
	// (a token each at least, a quarter of their text's bytes at most),
	// and the rule adds one interval more.
	if lo, hi := uint64(8), uint64(2*max(25, text/4)); got.CompletionTokens < lo || got.CompletionTokens > hi || got.PromptTokens == 0 || got.CostNanoUsd <= 0 {
		t.Errorf("recovered completion %d prompt %d cost %d", got.CompletionTokens, got.PromptTokens, got.CostNanoUsd)
	}
}

// copySpool copies the regular files of a spool directory, as the page
// cache holds them.
func copySpool(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMissingUsageIsEstimated: an answer without usage, or with malformed
// usage, is billed from the tokenizer's count of the prompt and of the
// answer's text, and marked estimated.
func TestMissingUsageIsEstimated(t *testing.T) {
	est := tokenize.New()
	tests := []struct {
		name   string
		stream bool
		mock   string
	}{
		{"non-stream without usage", false, `{"chunks":6,"no_usage":true}`},
		{"non-stream malformed usage", false, `{"chunks":6,"bad_usage":true}`},
		{"stream malformed usage", true, `{"chunks":6,"bad_usage":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAcctRig(t, nil)
			body := mockChat(tc.stream, tc.mock)
			resp := a.post("/v1/chat/completions", a.token(nil), body)
			var text string
			if tc.stream {
				for _, e := range readEvents(t, resp.Body) {
					var c chunk
					if json.Unmarshal([]byte(e.data), &c) == nil && len(c.Choices) > 0 {
						text += c.Choices[0].Delta.Content
					}
				}
				resp.Body.Close()
			} else {
				var out struct {
					Choices []struct {
						Message struct{ Content string } `json:"message"`
					} `json:"choices"`
				}
				if err := json.Unmarshal(readBody(t, resp), &out); err != nil || len(out.Choices) != 1 {
					t.Fatalf("answer: %v %+v", err, out)
				}
				text = out.Choices[0].Message.Content
			}
			if resp.StatusCode != 200 || strings.Count(text, " ") != 5 {
				t.Fatalf("status %d, answer %q", resp.StatusCode, text)
			}
			ev := a.events(t, 1)[0]
			price, _ := pricing.Default().Lookup("mock-gpt")
			wantIn, wantOut := uint64(est.ChatPrompt([]byte(body))), uint64(est.Count([]byte(text)))
			want := price.Cost(pricing.Usage{PromptTokens: wantIn, CompletionTokens: wantOut})
			if !ev.Estimated || ev.PromptTokens != wantIn || ev.CompletionTokens != wantOut || ev.CostNanoUsd != want || want <= 0 {
				t.Errorf("event estimated %v, tokens %d/%d, cost %d; want estimated, %d/%d, %d",
					ev.Estimated, ev.PromptTokens, ev.CompletionTokens, ev.CostNanoUsd, wantIn, wantOut, want)
			}
		})
	}
}

func TestUsageEventUpstreamFailureCostsNothing(t *testing.T) {
	a := newAcctRig(t, nil)
	readBody(t, a.post("/v1/chat/completions", a.token(nil), mockChat(false, `{"status":500}`)))
	ev := a.events(t, 1)[0]
	if ev.StatusCode != 502 || ev.ErrorType != "upstream_error" || ev.CostNanoUsd != 0 || ev.PromptTokens != 0 {
		t.Errorf("event status %d error %q cost %d prompt %d", ev.StatusCode, ev.ErrorType, ev.CostNanoUsd, ev.PromptTokens)
	}
}

func TestRateLimitFromClaims(t *testing.T) {
	a := newAcctRig(t, nil)
	tok := a.token(func(o *auth.MintOptions) { o.RPM = 2 })
	for i := 0; i < 2; i++ {
		if resp := a.post("/v1/chat/completions", tok, chatBody); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	resp := a.post("/v1/chat/completions", tok, chatBody)
	body := readBody(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d, retry-after %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if msg := errorShape(t, body, typeRateLimit, "rate_limit_exceeded"); !strings.HasPrefix(msg, "rate limit reached for token (rpm 2, tpm 0); retry in ") {
		t.Errorf("message %q does not name the token's limit", msg)
	}
	for h, want := range map[string]string{"x-ratelimit-limit-requests": "2", "x-ratelimit-global-limit-requests": "2", "x-ratelimit-gateways": "1"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
}

// TestRateLimitConfigured checks a configured rate limit applies to the
// scope it names, and only to the values it names: the refusal names the
// scope and the value.
func TestRateLimitConfigured(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.RateLimits = []config.RateLimit{
			{Scope: "team", Value: "nlp", RPM: 1},
			{Scope: "dept", Value: "finance", RPM: 1}, // not alice's dept
		}
	})
	tok := a.token(nil)
	if resp := a.post("/v1/chat/completions", tok, chatBody); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	resp := a.post("/v1/chat/completions", tok, chatBody)
	body := readBody(t, resp)
	if resp.StatusCode != 429 {
		t.Fatalf("second request in a minute on team nlp's rpm 1: %d: %s", resp.StatusCode, body)
	}
	if msg := errorShape(t, body, typeRateLimit, "rate_limit_exceeded"); !strings.HasPrefix(msg, "rate limit reached for team nlp (rpm 1, tpm 0); retry in ") {
		t.Errorf("message %q does not name the team limit", msg)
	}
	other := a.token(func(o *auth.MintOptions) { o.Team = "vision" })
	if resp := a.post("/v1/chat/completions", other, chatBody); resp.StatusCode != 200 {
		t.Errorf("team vision, which no limit names: %d", resp.StatusCode)
	}
}

// TestRateLimitSharedAcrossGateways runs the rig's gateway beside a second
// gateway's presence on the same NATS: each enforces half of the token's
// rpm, and the refusal says both the share and the limit.
func TestRateLimitSharedAcrossGateways(t *testing.T) {
	a := newAcctRig(t, nil)
	kv, err := ratelimit.EnsurePresenceBucket(context.Background(), a.js, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	other, err := ratelimit.StartPresence(ctx, kv, ratelimit.PresenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for a.gw.acct.Presence.Share().Gateways() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway sees %d gateways, want 2", a.gw.acct.Presence.Share().Gateways())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tok := a.token(func(o *auth.MintOptions) { o.RPM = 4; o.TPM = 1 << 20 })
	for i := range 2 {
		if resp := a.post("/v1/chat/completions", tok, chatBody); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	resp := a.post("/v1/chat/completions", tok, chatBody)
	body := readBody(t, resp)
	if resp.StatusCode != 429 {
		t.Fatalf("third request on a gateway holding half of rpm 4: %d: %s", resp.StatusCode, body)
	}
	errorShape(t, body, typeRateLimit, "rate_limit_exceeded")
	for h, want := range map[string]string{
		"x-ratelimit-limit-requests": "2", "x-ratelimit-global-limit-requests": "4",
		"x-ratelimit-limit-tokens": "524288", "x-ratelimit-global-limit-tokens": "1048576", "x-ratelimit-gateways": "2",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if !strings.Contains(string(body), "across 2 gateways: this one allows rpm 2") {
		t.Errorf("message does not give the share: %s", body)
	}
}

// TestBudgetStopsSpending runs 200 concurrent clients against one
// department budget. With clamping, spend never exceeds the limit on one
// gateway (README: budget bound), and the refusals are budget_exceeded 429s.
func TestBudgetStopsSpending(t *testing.T) {
	const limitNano = 500_000 // 0.0005 USD: about 100 requests of mock-gpt
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "research", AmountUSD: "0.0005", Period: "month"}}
		// 200 clients on a shared 2-core machine under -race: allow time.
		c.Providers[0].Timeouts.Total = time.Minute
		c.Providers[0].Timeouts.Connect = time.Minute
		c.Providers[0].Timeouts.FirstByte = time.Minute
	})
	tok := a.token(nil)
	body := `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"spend some money please"}],"mock":{"chunks":8}}`
	var ok, refused, clamped, waited atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 200; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				resp := a.post("/v1/chat/completions", tok, body)
				b := readBody(t, resp)
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
					if resp.Header.Get("X-Tollgate-Max-Tokens-Clamped") != "" {
						clamped.Add(1)
					}
					if resp.Header.Get("X-Tollgate-Budget-Wait-Ms") != "" {
						waited.Add(1)
					}
				case 429:
					refused.Add(1)
					if !strings.Contains(string(b), `"budget_exceeded"`) || !strings.Contains(string(b), "research") {
						t.Errorf("429 body: %s", b)
					}
				default:
					t.Errorf("status %d: %s", resp.StatusCode, b)
				}
			}
		}()
	}
	wg.Wait()
	events := a.events(t, int(ok.Load()+refused.Load()))
	var spent int64
	for _, ev := range events {
		spent += ev.CostNanoUsd
	}
	t.Logf("served %d, refused %d, clamped %d, waited for a budget lease %d, spent %d of %d nano-USD",
		ok.Load(), refused.Load(), clamped.Load(), waited.Load(), spent, limitNano)
	if waited.Load() == 0 {
		t.Error("no answer says it waited for the first budget lease grant (x-tollgate-budget-wait-ms)")
	}
	if refused.Load() == 0 || ok.Load() == 0 {
		t.Fatalf("the budget should both serve and refuse: served %d refused %d", ok.Load(), refused.Load())
	}
	if spent > limitNano {
		t.Errorf("spent %d nano-USD over a %d limit on one gateway", spent, limitNano)
	}
	// Refusals must be plain HTTP answers, and later requests keep being refused.
	resp := a.post("/v1/chat/completions", tok, body)
	if b := readBody(t, resp); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("after the budget: %d %s", resp.StatusCode, b)
	}
}

// TestBudgetRefusalFigures: a request refused on a total nothing was spent
// on says so, and gives its own worst case apart from spend and
// reservations, in the message (OpenAI and Anthropic shapes alike) and in
// the x-tollgate-budget-* headers (README: Budget refusals; issue #15).
func TestBudgetRefusalFigures(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "research", AmountUSD: "0.000001", Period: "day"}}
	})
	tok := a.token(nil)
	endpoints := []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"mock-gpt","max_tokens":4000,"messages":[{"role":"user","content":"hi"}]}`},
		{"messages", "/v1/messages", `{"model":"mock-gpt","max_tokens":4000,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for i, ep := range endpoints {
		t.Run(ep.name, func(t *testing.T) {
			resp := a.post(ep.path, tok, ep.body)
			body := readBody(t, resp)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var msg string
			if ep.path == "/v1/messages" {
				var e struct {
					Type  string `json:"type"`
					Error struct{ Type, Message string }
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" {
					t.Fatalf("not an Anthropic rate_limit_error body (%v): %s", err, body)
				}
				msg = e.Error.Message
			} else {
				msg = errorShape(t, body, typeBudget, "budget_exceeded")
			}
			// The refusal's usage event records the reservation: the estimate.
			ev := a.events(t, i+1)[i]
			if len(ev.Budgets) != 1 {
				t.Fatalf("refusal event budgets %+v, want the one dept limit", ev.Budgets)
			}
			est := ev.Budgets[0].ReservedNanoUsd
			if est <= 1_000 {
				t.Fatalf("estimate %d nano-USD, want over the 1000 nano-USD limit", est)
			}
			want := map[string]string{
				"X-Tollgate-Budget-Scope": "dept", "X-Tollgate-Budget-Value": "research", "X-Tollgate-Budget-Period": "day",
				"X-Tollgate-Budget-Limit-Usd": "0.000001", "X-Tollgate-Budget-Spent-Usd": "0.00",
				"X-Tollgate-Budget-Reserved-Usd": "0.00", "X-Tollgate-Budget-Held-Usd": "0.00",
				"X-Tollgate-Budget-Estimate-Usd": pricing.FormatUSD(est),
			}
			for h, v := range want {
				if got := resp.Header.Get(h); got != v {
					t.Errorf("%s: %q, want %q", h, got, v)
				}
			}
			wantMsg := `budget exceeded: dept "research" day limit 0.000001 USD: spent 0.00, reserved by requests in flight 0.00, this request's worst case ` + pricing.FormatUSD(est)
			if msg != wantMsg {
				t.Errorf("message\n %s\nwant\n %s", msg, wantMsg)
			}
		})
	}
}

// TestBudgetClampsMaxTokens: a request without max_tokens near the limit is
// clamped to what the budget still affords, and says so in a header.
func TestBudgetClampsMaxTokens(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		// 0.00003 USD buys about 50 output tokens of mock-gpt (0.60 USD/M).
		c.Budgets = []config.BudgetLimit{{Scope: "team", Value: "*", AmountUSD: "0.00003", Period: "day"}}
	})
	resp := a.post("/v1/chat/completions", a.token(nil), `{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}],"mock":{"chunks":100}}`)
	body := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	h := resp.Header.Get("X-Tollgate-Max-Tokens-Clamped")
	var n int
	if _, err := fmt.Sscan(h, &n); err != nil || n <= 0 || n >= 100 {
		t.Fatalf("clamp header %q, want a count below 100", h)
	}
	ev := a.events(t, 1)[0]
	if ev.CompletionTokens != uint64(n) || ev.ClampedMaxTokens != uint32(n) || ev.CostNanoUsd > 30_000 {
		t.Errorf("completion %d clamped %d (header %d) cost %d", ev.CompletionTokens, ev.ClampedMaxTokens, n, ev.CostNanoUsd)
	}
}

// TestRevocationRefusesEverywhere revokes tokens by jti and by subject and
// measures how long until the gateway refuses them (logged: the target is
// p99 under 100 ms; the figure is a benchmark, not an assertion).
func TestRevocationRefusesEverywhere(t *testing.T) {
	a := newAcctRig(t, nil)
	var lat []time.Duration
	for i := 0; i < 30; i++ {
		jti := fmt.Sprintf("key-%d", i)
		tok := a.token(func(o *auth.MintOptions) { o.KeyID = jti })
		if resp := a.post("/v1/chat/completions", tok, chatBody); resp.StatusCode != 200 {
			t.Fatalf("before revocation: %d", resp.StatusCode)
		}
		start := time.Now()
		if err := revoke.Revoke(context.Background(), a.revokedKV, revoke.KeyID, jti, "test", start); err != nil {
			t.Fatal(err)
		}
		for {
			resp := a.post("/v1/chat/completions", tok, chatBody)
			body := readBody(t, resp)
			if resp.StatusCode == 401 {
				errorShape(t, body, typeAuthentication, "token_revoked")
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("token %s still accepted 5 s after revocation", jti)
			}
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("revocation to refusal over HTTP: p50 %v, p99 %v (n=%d)", lat[len(lat)/2], lat[len(lat)*99/100], len(lat))
	// By subject: every token of the subject.
	tok := a.token(func(o *auth.MintOptions) { o.Subject = "mallory" })
	if err := revoke.Revoke(context.Background(), a.revokedKV, revoke.Subject, "mallory", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 5*time.Second, "subject revocation", func() bool {
		resp := a.post("/v1/chat/completions", tok, chatBody)
		readBody(t, resp)
		return resp.StatusCode == 401
	})
	if resp := a.post("/v1/chat/completions", a.token(nil), chatBody); resp.StatusCode != 200 {
		t.Errorf("other subjects must pass: %d", resp.StatusCode)
	}
}

// TestDegradationByTeam: a ladder on team research/nlp applies to the
// token's team nlp of research; one on finance/nlp never does.
func TestDegradationByTeam(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{
			{Scope: "team", Value: "research/nlp", AmountUSD: "0.0001", Period: "day", Degrade: []config.DegradeStep{
				{At: 0.3, Priorities: []string{"batch"}, Refuse: true}}},
			{Scope: "team", Value: "finance/nlp", AmountUSD: "0.0001", Period: "day", Degrade: []config.DegradeStep{
				{At: 0.01, Refuse: true}}},
		}
	})
	tok := a.token(nil)
	body := `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`
	used := func() float64 {
		return float64(a.tracker.Used(budget.ScopeTeam, "research/nlp", budget.PeriodDay)) / 100_000
	}
	for used() < 0.3 {
		resp := a.post("/v1/chat/completions", tok, body)
		if b := readBody(t, resp); resp.StatusCode != 200 {
			t.Fatalf("interactive at %.0f%% of research/nlp: %d %s", 100*used(), resp.StatusCode, b)
		}
	}
	resp := a.post("/v1/chat/completions", tok, body, "X-Tollgate-Priority", "batch")
	if b := readBody(t, resp); resp.StatusCode != 429 || !strings.Contains(string(b), "budget_degraded") {
		t.Fatalf("batch at %.0f%% of research/nlp: %d %s", 100*used(), resp.StatusCode, b)
	}
}

// TestDegradationLadder: past 30% of the department's budget, batch traffic
// is served by a cheaper model; past 60% it is refused while interactive
// traffic still passes; each step is recorded in the event and alerted once.
func TestDegradationLadder(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Models = append(c.Models, config.Model{Name: "mock-cheap", Type: "chat", Targets: []config.Target{{Provider: "mock", Model: "mock-gpt-mini"}}})
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "0.0001", Period: "day", Degrade: []config.DegradeStep{
			{At: 0.3, Priorities: []string{"batch"}, Model: "mock-cheap"},
			{At: 0.6, Priorities: []string{"batch"}, Refuse: true},
		}}}
	})
	alerts, err := a.nc.SubscribeSync("tollgate.budget.alerts.dept")
	if err != nil {
		t.Fatal(err)
	}
	tok := a.token(nil)
	body := `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`
	used := func() float64 {
		return float64(a.tracker.Used(budget.ScopeDept, "research", budget.PeriodDay)) / 100_000
	}
	send := func(prio string) (*http.Response, []byte) {
		resp := a.post("/v1/chat/completions", tok, body, "X-Tollgate-Priority", prio)
		return resp, readBody(t, resp)
	}
	// Interactive spending up to 30%.
	for used() < 0.3 {
		if resp, b := send(""); resp.StatusCode != 200 {
			t.Fatalf("interactive at %.0f%%: %d %s", 100*used(), resp.StatusCode, b)
		}
	}
	resp, b := send("batch")
	if resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Model") != "mock-gpt-mini" || resp.Header.Get("X-Tollgate-Degraded") == "" {
		t.Fatalf("batch at %.0f%%: %d model %q: %s", 100*used(), resp.StatusCode, resp.Header.Get("X-Tollgate-Model"), b)
	}
	for used() < 0.6 {
		if resp, b := send("interactive"); resp.StatusCode != 200 {
			t.Fatalf("interactive at %.0f%%: %d %s", 100*used(), resp.StatusCode, b)
		}
	}
	resp, b = send("batch")
	if resp.StatusCode != 429 || !strings.Contains(string(b), "budget_degraded") {
		t.Fatalf("batch at %.0f%%: %d %s", 100*used(), resp.StatusCode, b)
	}
	if resp, b := send("interactive"); resp.StatusCode != 200 {
		t.Fatalf("interactive must still pass: %d %s", resp.StatusCode, b)
	}
	var steps []string
	for {
		msg, err := alerts.NextMsg(2 * time.Second)
		if err != nil {
			break
		}
		var al struct{ Kind, Step string }
		if json.Unmarshal(msg.Data, &al) == nil && al.Kind == "degradation" {
			steps = append(steps, al.Step)
		}
	}
	if len(steps) != 2 {
		t.Errorf("alerts %v, want one per step", steps)
	}
	var degraded int
	all := a.allEvents(t)
	for _, ev := range all {
		if ev.DegradationStep != "" {
			degraded++
		}
	}
	if degraded != 2 {
		t.Errorf("%d events record a degradation step, want 2 (one served cheaper, one refused)", degraded)
	}
}

// allEvents reads every event currently in the stream. An event is
// published after its response went out: wait for the count you expect
// (events) when the last request just ended.
func (a *acctRig) allEvents(t *testing.T) []*usagev1.UsageEvent {
	t.Helper()
	testkit.Wait(t, 5*time.Second, "the publisher to flush", func() bool {
		st := a.pub.Stats()
		return st.QueueLen == 0 && st.Pending == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := a.js.Stream(ctx, usage.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return a.read(t, func(_, msgs int) bool { return msgs >= int(info.State.Msgs) })
}

// TestStreamEndingsAreBilled checks the billing rule of every way a stream
// can end (README: Streams).
func TestStreamEndingsAreBilled(t *testing.T) {
	const finishNoDone = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello there\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	tests := []struct {
		name      string
		raw       string // upstream transcript; empty uses the mock
		mock      string
		status    uint32
		errType   string
		estimated bool
		minOut    uint64
	}{
		{"done", "", `{"chunks":4}`, 200, "", false, 4},
		{"finish reason without done", finishNoDone, "", 200, "", true, 1},
		{"upstream cut mid-stream", "", `{"chunks":10,"cut_after":3}`, 200, "upstream_stream_cut", true, 3},
		{"upstream error event", "", `{"chunks":10,"error_event_after":2}`, 200, "upstream_error", true, 2},
		{"idle timeout", "", `{"chunks":4,"chunk_delay_ms":2500}`, 200, "upstream_timeout", true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			if tc.raw != "" {
				url = rawUpstream(t, tc.raw)
			}
			a := newAcctRig(t, func(c *config.Config) {
				if url != "" {
					c.Providers[0].BaseURL = url
				}
			})
			mock := tc.mock
			if mock == "" {
				mock = "{}"
			}
			resp := a.post("/v1/chat/completions", a.token(nil), streamBody(mock))
			readEvents(t, resp.Body)
			resp.Body.Close()
			ev := a.events(t, 1)[0]
			if ev.StatusCode != tc.status || ev.ErrorType != tc.errType || ev.Estimated != tc.estimated || ev.ClientAborted {
				t.Errorf("status %d error %q estimated %v aborted %v; want %d %q %v false",
					ev.StatusCode, ev.ErrorType, ev.Estimated, ev.ClientAborted, tc.status, tc.errType, tc.estimated)
			}
			if ev.CompletionTokens < tc.minOut || ev.PromptTokens == 0 || ev.CostNanoUsd <= 0 {
				t.Errorf("billed prompt %d completion %d (want >= %d) cost %d", ev.PromptTokens, ev.CompletionTokens, tc.minOut, ev.CostNanoUsd)
			}
		})
	}
	t.Run("gateway shutdown", func(t *testing.T) {
		a := newAcctRig(t, nil)
		resp := a.post("/v1/chat/completions", a.token(nil), streamBody(`{"chunks":10,"chunk_delay_ms":50}`))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.gw.Shutdown(ctx)
		}()
		events := readEvents(t, resp.Body)
		resp.Body.Close()
		ev := a.events(t, 1)[0]
		if events[len(events)-1].data != "[DONE]" || ev.StatusCode != 200 || ev.Estimated || ev.CompletionTokens != 10 {
			t.Errorf("stream across shutdown: last %q, event status %d estimated %v completion %d",
				events[len(events)-1].data, ev.StatusCode, ev.Estimated, ev.CompletionTokens)
		}
	})
}

// TestResponseCache: identical requests of a caching model are served from
// the NATS KV cache (streams replayed event by event), per tenant, billed
// zero by default and marked in the usage data; no-cache bypasses it. Chat
// and /v1/messages behave alike (README: Response cache); their entries
// are apart, keyed by endpoint.
func TestResponseCache(t *testing.T) {
	const messagesBody = `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`
	endpoints := []struct {
		name, path, body, stream string
		last                     string // the last data line of a stream
	}{
		{name: "chat", path: "/v1/chat/completions", body: chatBody, stream: streamBody(`{"chunks":5}`), last: "[DONE]"},
		{name: "messages", path: "/v1/messages", body: messagesBody,
			stream: `{"model":"mock-gpt","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"stream please"}]}`,
			last:   `{"type":"message_stop"}`},
	}
	for _, ep := range endpoints {
		t.Run(ep.name, func(t *testing.T) { testResponseCache(t, ep.path, ep.body, ep.stream, ep.last) })
	}
}

func testResponseCache(t *testing.T, path, body, streamed, last string) {
	a := newAcctRig(t, func(c *config.Config) { c.Models[0].Cache = config.ModelCache{TTL: time.Minute} })
	ctx := context.Background()
	cache, err := respcache.Open(ctx, a.js, respcache.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = cache.Run(cctx) }()
	// Swap in a gateway with the cache, on the same accounting.
	st := a.gw.state.Load()
	gw, err := New(Options{Config: a.cfg, Verifier: st.verifier, Logger: a.gw.log, Accounting: a.gw.acct, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() { _ = gw.Shutdown(ctx) })
	a.gw, a.url = gw, "http://"+ln.Addr().String()

	research := a.token(nil)
	sales := a.token(func(o *auth.MintOptions) { o.Dept = "sales" })
	ask := func(tok, body string, h ...string) (string, string) {
		resp := a.post(path, tok, body, h...)
		b := readBody(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return resp.Header.Get("X-Tollgate-Cache"), string(b)
	}
	waitStored := func(n int64) {
		testkit.Wait(t, 5*time.Second, "the cache write", func() bool { return cache.Stats().Stored >= n })
	}
	state, first := ask(research, body)
	if state != "miss" {
		t.Fatalf("first request: cache %q", state)
	}
	waitStored(1)
	if state, again := ask(research, body); state != "hit" || again != first {
		t.Errorf("second request: cache %q, same body %v", state, again == first)
	}
	if state, _ := ask(sales, body); state != "miss" {
		t.Errorf("another department must not see research's cache: %q", state)
	}
	if state, _ := ask(research, body, "Cache-Control", "no-cache"); state != "bypass" {
		t.Errorf("no-cache: %q", state)
	}
	// Streams are cached as events and replayed.
	// The sales miss and the no-cache answer were stored as well; wait for
	// the write after them, the stream's.
	waitStored(3)
	before := cache.Stats().Stored
	resp := a.post(path, research, streamed)
	live := readEvents(t, resp.Body)
	resp.Body.Close()
	waitStored(before + 1)
	resp = a.post(path, research, streamed)
	replayed := readEvents(t, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Tollgate-Cache") != "hit" || len(replayed) != len(live) || replayed[len(replayed)-1].data != last {
		t.Fatalf("stream replay: cache %q, %d events vs %d live", resp.Header.Get("X-Tollgate-Cache"), len(replayed), len(live))
	}
	// Six requests, six events: the last one's is published after its
	// client read the end of the replay, so wait for all six.
	var hits int
	for _, ev := range a.events(t, 6) {
		if ev.CacheHit {
			hits++
			if ev.CostNanoUsd != 0 || ev.CompletionTokens == 0 {
				t.Errorf("a hit is billed zero with the original usage: cost %d tokens %d", ev.CostNanoUsd, ev.CompletionTokens)
			}
		}
	}
	if hits != 2 {
		t.Errorf("%d events marked as cache hits, want 2", hits)
	}
}
