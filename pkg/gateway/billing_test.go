package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/valyala/fasthttp"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// Attacks on what a request is billed (issue #41, README: Security): a
// client steering its own bill through stream_options, n, the output-limit
// fields, the response cache or the end of its stream.

// lastWinsUpstream is the mock behind a handler that records each request
// body and reads stream_options.include_usage as OpenAI's and vLLM's
// Python servers do, the last of repeated keys winning (encoding/json reads
// JSON so too): a stream whose last stream_options does not ask for usage
// gets none.
type lastWinsUpstream struct {
	mock   *mockllm.Server
	url    string
	mu     sync.Mutex
	bodies []string
}

func newLastWinsUpstream(t *testing.T) *lastWinsUpstream {
	u := &lastWinsUpstream{mock: mockllm.New(mockllm.Config{})}
	h := u.mock.Handler()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		body := ctx.Request.Body()
		u.mu.Lock()
		u.bodies = append(u.bodies, string(body))
		u.mu.Unlock()
		var last struct {
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if json.Unmarshal(body, &last) == nil && (last.StreamOptions == nil || !last.StreamOptions.IncludeUsage) {
			ctx.Request.Header.Set("X-Mock-No-Usage", "1")
		}
		h(ctx)
	}}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	u.url = "http://" + ln.Addr().String() + "/v1"
	return u
}

// last returns the body of the latest request the upstream received.
func (u *lastWinsUpstream) last(t *testing.T) string {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		t.Fatal("the upstream received no request")
	}
	return u.bodies[len(u.bodies)-1]
}

// received counts the requests the upstream received.
func (u *lastWinsUpstream) received() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

// topLevel returns the raw values of the top-level members of the JSON
// object body named key, every repeat included.
func topLevel(t *testing.T, body, key string) []string {
	t.Helper()
	var out []string
	dec := json.NewDecoder(strings.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", body)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if k == key {
			out = append(out, string(v))
		}
	}
	return out
}

// TestStreamOptionsCannotSteerBilling: whatever stream_options a client
// sends, the upstream gets one stream_options member asking for usage
// (never the client's beside the gateway's, which an upstream reading the
// last of repeated keys would obey), and the request is billed the
// provider's usage, never an estimate.
func TestStreamOptionsCannotSteerBilling(t *testing.T) {
	for _, so := range []string{`null`, `{}`, `{"include_usage":false}`, `{"include_usage":null}`, `{ "other" : 1 }`} {
		t.Run(so, func(t *testing.T) {
			up := newLastWinsUpstream(t)
			a := newAcctRig(t, func(c *config.Config) { c.Providers[0].BaseURL = up.url })
			body := `{"model":"mock-gpt","stream":true,"stream_options":` + so +
				`,"messages":[{"role":"user","content":"think hard"}],"mock":{"chunks":5}}`
			resp := a.post("/v1/chat/completions", a.token(nil), body)
			events := readEvents(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(events) == 0 || events[len(events)-1].data != "[DONE]" {
				t.Fatalf("status %d, %d events", resp.StatusCode, len(events))
			}
			sent := up.last(t)
			opts := topLevel(t, sent, "stream_options")
			if len(opts) != 1 {
				t.Fatalf("the upstream got %d stream_options members: %s", len(opts), sent)
			}
			var o map[string]any
			if err := json.Unmarshal([]byte(opts[0]), &o); err != nil || o["include_usage"] != true {
				t.Errorf("stream_options sent %s, want include_usage true", opts[0])
			}
			for _, e := range events {
				if strings.Contains(e.data, `"usage":{`) {
					t.Errorf("the client got a usage chunk it did not ask for: %s", e.data)
				}
			}
			ev := a.events(t, 1)[0]
			l := up.mock.Ledger()
			if len(l.Answers) != 1 {
				t.Fatalf("provider ledger %+v, want one answer with usage", l)
			}
			want := l.Answers[0]
			if ev.Estimated || int64(ev.PromptTokens) != want.PromptTokens || int64(ev.CompletionTokens) != want.CompletionTokens {
				t.Errorf("billed %d/%d tokens (estimated %v); the provider reported %d/%d",
					ev.PromptTokens, ev.CompletionTokens, ev.Estimated, want.PromptTokens, want.CompletionTokens)
			}
		})
	}
}

// TestFieldTypesTheGatewayActsOn: a member the gateway reads to decide
// what a request costs or how it runs must be of the type it acts on. A
// lenient upstream would read "true" or 1 as true and "100000" as a
// number after the gateway read them as absent: each gets 400
// invalid_type naming the member, and nothing reaches the provider.
func TestFieldTypesTheGatewayActsOn(t *testing.T) {
	up := newLastWinsUpstream(t)
	r := newRigFor(t, up.mock, up.url, nil)
	tok := r.token(nil)
	chat := func(members string) string {
		return `{"model":"mock-gpt",` + members + `,"messages":[{"role":"user","content":"hi"}]}`
	}
	resp := func(members string) string { return `{"model":"mock-gpt",` + members + `,"input":"hi"}` }
	comp := func(members string) string { return `{"model":"mock-gpt",` + members + `,"prompt":"hi"}` }
	tests := []struct {
		name, path, body, param string
	}{
		{"background string", "/v1/responses", resp(`"background":"true"`), "background"},
		{"background number", "/v1/responses", resp(`"background":1`), "background"},
		{"background object", "/v1/responses", resp(`"background":{}`), "background"},
		{"stream string", "/v1/chat/completions", chat(`"stream":"true"`), "stream"},
		{"stream number", "/v1/responses", resp(`"stream":1`), "stream"},
		{"stream_options string", "/v1/chat/completions", chat(`"stream":true,"stream_options":"x"`), "stream_options"},
		{"stream_options array", "/v1/chat/completions", chat(`"stream":true,"stream_options":[]`), "stream_options"},
		{"stream_options number", "/v1/completions", comp(`"stream":true,"stream_options":0`), "stream_options"},
		{"include_usage string", "/v1/chat/completions", chat(`"stream":true,"stream_options":{"include_usage":"yes"}`), "stream_options.include_usage"},
		{"max_tokens string", "/v1/chat/completions", chat(`"max_tokens":"100000"`), "max_tokens"},
		{"max_tokens fraction", "/v1/chat/completions", chat(`"max_tokens":16.5`), "max_tokens"},
		{"max_tokens exponent", "/v1/completions", comp(`"max_tokens":1e5`), "max_tokens"},
		{"max_tokens negative", "/v1/chat/completions", chat(`"max_tokens":-1`), "max_tokens"},
		{"max_completion_tokens string", "/v1/chat/completions", chat(`"max_completion_tokens":"9"`), "max_completion_tokens"},
		{"max_output_tokens string", "/v1/responses", resp(`"max_output_tokens":"100000"`), "max_output_tokens"},
		{"n string", "/v1/chat/completions", chat(`"n":"128"`), "n"},
		{"n zero", "/v1/chat/completions", chat(`"n":0`), "n"},
		{"n fraction", "/v1/chat/completions", chat(`"n":2.0`), "n"},
		{"best_of string", "/v1/completions", comp(`"best_of":"20"`), "best_of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.post(tc.path, tok, tc.body)
			body := readBody(t, resp)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			errorShape(t, body, typeInvalidRequest, "invalid_type")
			var e struct{ Error struct{ Param string } }
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Param != tc.param {
				t.Errorf("param %q, want %q (%v)", e.Error.Param, tc.param, err)
			}
		})
	}
	if n := up.received(); n != 0 {
		t.Errorf("the upstream received %d refused requests", n)
	}
	// null stands for absent, as in the OpenAI API; booleans pass.
	for _, ok := range []struct{ path, body string }{
		{"/v1/responses", resp(`"background":false,"stream":null,"max_output_tokens":null`)},
		{"/v1/chat/completions", chat(`"stream":false,"stream_options":null,"n":1,"max_tokens":null,"max_completion_tokens":16`)},
	} {
		if resp := r.post(ok.path, tok, ok.body); resp.StatusCode != 200 {
			t.Errorf("%s %s: status %d: %s", ok.path, ok.body, resp.StatusCode, readBody(t, resp))
		}
	}
}

// TestReservationCoversEveryAnswer: what a request reserves bounds what
// the upstream may generate: n (or best_of) answers of its output limit,
// the larger of max_tokens and max_completion_tokens when both are set.
// The figure is read from a refusal's x-tollgate-budget-estimate-usd,
// the request's worst case.
func TestReservationCoversEveryAnswer(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{{Scope: "subject", Value: "alice", AmountUSD: "0.000001", Period: "day"}}
	})
	tok := a.token(nil)
	est := tokenize.New()
	price, _ := pricing.Default().Lookup("mock-gpt")
	msgs := `"messages":[{"role":"user","content":"write at length"}]`
	tests := []struct {
		name, path, body string
		out              uint64 // output tokens the reservation must cover
	}{
		{"n 1", "/v1/chat/completions", `{"model":"mock-gpt","max_tokens":50,` + msgs + `}`, 50},
		{"n 128", "/v1/chat/completions", `{"model":"mock-gpt","n":128,"max_tokens":50,` + msgs + `}`, 128 * 50},
		{"n without a limit", "/v1/chat/completions", `{"model":"mock-gpt","n":3,` + msgs + `}`, 3 * 4096},
		{"max_tokens larger, first", "/v1/chat/completions", `{"model":"mock-gpt","max_tokens":3000,"max_completion_tokens":10,` + msgs + `}`, 3000},
		{"max_tokens larger, last", "/v1/chat/completions", `{"model":"mock-gpt","max_completion_tokens":10,"max_tokens":3000,` + msgs + `}`, 3000},
		{"max_completion_tokens larger", "/v1/chat/completions", `{"model":"mock-gpt","max_tokens":10,"max_completion_tokens":3000,` + msgs + `}`, 3000},
		{"best_of over n", "/v1/completions", `{"model":"mock-gpt","n":2,"best_of":5,"max_tokens":40,"prompt":"write at length"}`, 5 * 40},
		{"n over best_of", "/v1/completions", `{"model":"mock-gpt","n":6,"best_of":2,"max_tokens":40,"prompt":"write at length"}`, 6 * 40},
		{"responses", "/v1/responses", `{"model":"mock-gpt","max_output_tokens":70,"input":"write at length"}`, 70},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := a.post(tc.path, tok, tc.body)
			body := readBody(t, resp)
			if resp.StatusCode != 429 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			prompt := uint64(est.Prompt([]byte(tc.body)))
			if tc.path == "/v1/chat/completions" {
				prompt = uint64(est.ChatPrompt([]byte(tc.body)))
			}
			want := pricing.FormatUSD(price.Cost(pricing.Usage{PromptTokens: prompt, CompletionTokens: tc.out}))
			if got := resp.Header.Get("X-Tollgate-Budget-Estimate-Usd"); got != want {
				t.Errorf("reserved %s USD, want %s (%d output tokens)", got, want, tc.out)
			}
		})
	}
}

// TestClampCoversEveryField: a budget clamp is per answer and is written on
// every output-limit field the request has, so that the upstream, whichever
// field it reads, cannot generate more than was reserved.
func TestClampCoversEveryField(t *testing.T) {
	up := newLastWinsUpstream(t)
	a := newAcctRig(t, func(c *config.Config) {
		c.Providers[0].BaseURL = up.url
		// 0.00003 USD buys about 50 output tokens of mock-gpt.
		c.Budgets = []config.BudgetLimit{{Scope: "subject", Value: "alice", AmountUSD: "0.00003", Period: "day"}}
	})
	body := `{"model":"mock-gpt","n":2,"max_tokens":1000,"max_completion_tokens":900,"messages":[{"role":"user","content":"hi"}]}`
	resp := a.post("/v1/chat/completions", a.token(nil), body)
	if b := readBody(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	clamp := resp.Header.Get("X-Tollgate-Max-Tokens-Clamped")
	n, err := strconv.Atoi(clamp)
	if err != nil || n <= 0 || n >= 25 {
		t.Fatalf("clamp header %q, want a count below 25 per answer", clamp)
	}
	sent := up.last(t)
	for _, f := range []string{"max_tokens", "max_completion_tokens"} {
		if v := topLevel(t, sent, f); len(v) != 1 || v[0] != clamp {
			t.Errorf("the upstream got %s %v, want [%s]", f, v, clamp)
		}
	}
	ev := a.events(t, 1)[0]
	price, _ := pricing.Default().Lookup("mock-gpt")
	want := price.Cost(pricing.Usage{PromptTokens: uint64(tokenize.New().ChatPrompt([]byte(body))), CompletionTokens: uint64(2 * n)})
	if len(ev.Budgets) != 1 || ev.Budgets[0].ReservedNanoUsd != want || want > 30_000 {
		t.Errorf("reserved %+v, want %d nano-USD (two answers of %d tokens) within the 30000 limit", ev.Budgets, want, n)
	}
}

// useCache gives a's gateway the NATS KV response cache, on the same
// accounting, and returns the cache.
func (a *acctRig) useCache(t *testing.T) *respcache.Cache {
	t.Helper()
	ctx := context.Background()
	cache, err := respcache.Open(ctx, a.js, respcache.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = cache.Run(cctx) }()
	st := a.gw.state.Load()
	gw, err := New(Options{Config: a.cfg, Verifier: st.verifier, Logger: a.gw.log, Accounting: a.gw.acct, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() { _ = gw.Shutdown(ctx) })
	a.gw, a.url = gw, "http://"+ln.Addr().String()
	return cache
}

// TestCacheHitsAreAdmitted: a cache hit is a request like any other. It
// counts against rpm limits whatever it costs; with cache.bill: full it
// reserves its cost against the budgets, and one that does not fit is
// refused; with cache.bill: zero it costs nothing and no budget refuses it
// (README: Response cache).
func TestCacheHitsAreAdmitted(t *testing.T) {
	for _, bill := range []string{config.CacheBillFull, config.CacheBillZero} {
		t.Run(bill, func(t *testing.T) {
			a := newAcctRig(t, func(c *config.Config) {
				c.Models[0].Cache = config.ModelCache{TTL: time.Minute, Bill: bill}
				c.Budgets = []config.BudgetLimit{{Scope: "subject", Value: "bob", AmountUSD: "0.000001", Period: "day"}}
			})
			cache := a.useCache(t)
			alice := a.token(nil)
			bob := a.token(func(o *auth.MintOptions) { o.Subject = "bob" })                // over his budget
			carol := a.token(func(o *auth.MintOptions) { o.Subject = "carol"; o.RPM = 1 }) // one request a minute
			if resp := a.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Cache") != "miss" {
				t.Fatalf("first request: %d, cache %q", resp.StatusCode, resp.Header.Get("X-Tollgate-Cache"))
			}
			testkit.Wait(t, 5*time.Second, "the cache write", func() bool { return cache.Stats().Stored >= 1 })

			resp := a.post("/v1/chat/completions", bob, chatBody)
			body := readBody(t, resp)
			if bill == config.CacheBillFull {
				if resp.StatusCode != 429 || resp.Header.Get("X-Tollgate-Cache") == "hit" {
					t.Fatalf("a hit billed in full over the budget: %d, cache %q: %s", resp.StatusCode, resp.Header.Get("X-Tollgate-Cache"), body)
				}
				errorShape(t, body, typeBudget, "budget_exceeded")
			} else if resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Cache") != "hit" {
				t.Fatalf("a hit billed zero over the budget: %d, cache %q: %s", resp.StatusCode, resp.Header.Get("X-Tollgate-Cache"), body)
			}

			if resp := a.post("/v1/chat/completions", carol, chatBody); resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Cache") != "hit" {
				t.Fatalf("carol's first request: %d, cache %q", resp.StatusCode, resp.Header.Get("X-Tollgate-Cache"))
			}
			resp = a.post("/v1/chat/completions", carol, chatBody)
			body = readBody(t, resp)
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("a second hit within carol's rpm 1: %d: %s", resp.StatusCode, body)
			}
			errorShape(t, body, typeRateLimit, "rate_limit_exceeded")

			var hits, refused int
			for _, ev := range a.events(t, 4) {
				switch {
				case ev.CacheHit:
					hits++
					price, _ := pricing.Default().Lookup(ev.ServedModel)
					want := int64(0)
					if bill == config.CacheBillFull {
						want = price.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens})
					}
					if ev.CostNanoUsd != want || want < 0 {
						t.Errorf("hit billed %d nano-USD, want %d", ev.CostNanoUsd, want)
					}
				case ev.StatusCode == 429:
					refused++
					if ev.CostNanoUsd != 0 {
						t.Errorf("refused hit billed %d", ev.CostNanoUsd)
					}
				}
			}
			if wantHits := map[string]int{config.CacheBillFull: 1, config.CacheBillZero: 2}[bill]; hits != wantHits || refused != 4-1-wantHits {
				t.Errorf("%d hits and %d refusals recorded, want %d and %d", hits, refused, wantHits, 4-1-wantHits)
			}
		})
	}
}

// TestClampedAnswersAreNotCached: an answer cut short by a budget clamp is
// never stored: it would be served, cut, to teammates sending the same
// body with budget to spare.
func TestClampedAnswersAreNotCached(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Models[0].Cache = config.ModelCache{TTL: time.Minute}
		c.Budgets = []config.BudgetLimit{{Scope: "subject", Value: "alice", AmountUSD: "0.00003", Period: "day"}}
	})
	cache := a.useCache(t)
	body := `{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}],"mock":{"chunks":100}}`
	resp := a.post("/v1/chat/completions", a.token(nil), body)
	if b := readBody(t, resp); resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Max-Tokens-Clamped") == "" {
		t.Fatalf("alice: status %d, clamp %q: %s", resp.StatusCode, resp.Header.Get("X-Tollgate-Max-Tokens-Clamped"), b)
	}
	// A non-stream answer is handed to the cache before it goes out.
	if q := cache.Stats().Queued; q != 0 {
		t.Fatalf("the clamped answer was queued for the cache (%d)", q)
	}
	bob := a.token(func(o *auth.MintOptions) { o.Subject = "bob" })
	resp = a.post("/v1/chat/completions", bob, body)
	b := readBody(t, resp)
	var out struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.Header.Get("X-Tollgate-Cache") != "miss" || out.Usage.CompletionTokens != 100 {
		t.Errorf("bob: cache %q, %d completion tokens (%v), want a miss answered in full", resp.Header.Get("X-Tollgate-Cache"), out.Usage.CompletionTokens, err)
	}
}

// finishThenUsage is an upstream that streams an answer and its
// finish_reason, then waits for release before it sends the usage chunk
// and [DONE], as a provider does a moment later.
func finishThenUsage(t *testing.T, release <-chan struct{}) string {
	const (
		answer = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"the whole answer\"},\"finish_reason\":null}]}\n\n" +
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
		usage = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1234,\"completion_tokens\":5678,\"total_tokens\":6912,\"completion_tokens_details\":{\"reasoning_tokens\":5000}}}\n\n" +
			"data: [DONE]\n\n"
	)
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = io.WriteString(w, answer)
			_ = w.Flush()
			select {
			case <-release:
			case <-time.After(10 * time.Second): // a bound, not a wait: the test releases it
			}
			_, _ = io.WriteString(w, usage)
			_ = w.Flush()
		})
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

// TestClientLeavingAfterFinishIsBilledItsUsage: a client that closes its
// stream right after the finish_reason chunk got the whole answer; the
// usage chunk the provider sends after it is still read (within a bound)
// and billed, reasoning tokens included, instead of an estimate of the
// visible text.
func TestClientLeavingAfterFinishIsBilledItsUsage(t *testing.T) {
	release := make(chan struct{})
	url := finishThenUsage(t, release)
	a := newAcctRig(t, func(c *config.Config) { c.Providers[0].BaseURL = url })
	resp := a.post("/v1/chat/completions", a.token(nil), `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before its finish_reason: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"finish_reason":"stop"`) {
			break
		}
	}
	resp.Body.Close() // the client leaves right after the finish chunk
	testkit.Wait(t, 5*time.Second, "the gateway to see the client leave", func() bool {
		return strings.Contains(a.logs.String(), "client left after the answer's finish reason")
	})
	close(release)
	ev := a.events(t, 1)[0]
	price, _ := pricing.Default().Lookup("mock-gpt")
	want := price.Cost(pricing.Usage{PromptTokens: 1234, CompletionTokens: 5678, ReasoningTokens: 5000})
	if ev.Estimated || ev.PromptTokens != 1234 || ev.CompletionTokens != 5678 || ev.ReasoningTokens != 5000 || ev.CostNanoUsd != want {
		t.Errorf("billed estimated %v, %d/%d tokens (%d reasoning), %d nano-USD; the provider reported 1234/5678 (5000), %d nano-USD",
			ev.Estimated, ev.PromptTokens, ev.CompletionTokens, ev.ReasoningTokens, ev.CostNanoUsd, want)
	}
	if ev.ClientAborted || ev.StatusCode != 200 {
		t.Errorf("event aborted %v status %d, want a complete answer (200)", ev.ClientAborted, ev.StatusCode)
	}
}
