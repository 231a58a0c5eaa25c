package conformance_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
	"google.golang.org/protobuf/proto"
)

const (
	// devConfig is the config `make run` uses.
	devConfig = "../../deploy/dev/tollgate.yaml"
	// nodeDir holds the framework tests: package.json and its lock.
	nodeDir = "node"
)

// TestFrameworks runs the Node tests in node/ (the Vercel AI SDK and
// LangChain.js, versions pinned in node/package-lock.json) against a
// gateway on the dev config with its built-in mock, as `make run` serves
// it (issue #16). With CI=true a missing npm or a failed install fails the
// test; otherwise they skip it. The dependencies are installed with npm ci
// when node_modules is missing or older than the lock file (always in CI).
func TestFrameworks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the framework tests run node")
	}
	ci := os.Getenv("CI") == "true"
	npm, err := exec.LookPath("npm")
	if err != nil {
		if ci {
			t.Fatal("npm not found: CI needs node 20 and npm for the framework tests (Vercel AI SDK, LangChain.js)")
		}
		t.Skip("npm not found: install node 20 and npm to run the framework tests (Vercel AI SDK, LangChain.js)")
	}
	if ci || stale(nodeDir) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = nodeDir
		if out, err := cmd.CombinedOutput(); err != nil {
			if ci {
				t.Fatalf("npm ci: %v\n%s", err, out)
			}
			t.Skipf("npm ci failed (is the npm registry reachable?): %v\n%s", err, out)
		}
	}
	url, tok, js := startDev(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "test")
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), "TOLLGATE_URL="+url, "TOLLGATE_TOKEN="+tok)
	out, err := cmd.CombinedOutput()
	t.Logf("npm test:\n%s", out)
	if err != nil {
		t.Fatalf("npm test: %v", err)
	}
	checkBilled(t, js)
}

// stale reports whether dir/node_modules is missing or older than the lock.
func stale(dir string) bool {
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return true
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	return err != nil || lock.ModTime().After(installed.ModTime())
}

// startDev starts a gateway on the dev config, its mock provider served by
// mockllm as the gateway program does, usage events going to an embedded
// JetStream; it returns the gateway's URL, a dev token and the stream.
func startDev(t *testing.T) (string, string, jetstream.JetStream) {
	return startDevWith(t, nil)
}

// startDevWith is startDev with extend, when not nil, adjusting the config
// once the mock's URL is known.
func startDevWith(t *testing.T, extend func(cfg *config.Config, mockURL string)) (string, string, jetstream.JetStream) {
	t.Helper()
	cfg, err := config.Load(devConfig)
	if err != nil {
		t.Fatal(err)
	}
	url, js := startGateway(t, func(mockURL string) *config.Config {
		for i := range cfg.Providers {
			if cfg.Providers[i].Kind == config.KindMock {
				cfg.Providers[i].BaseURL = mockURL
			}
		}
		if extend != nil {
			extend(cfg, mockURL)
		}
		return cfg
	})
	is := cfg.Auth.Issuers[0]
	tok, err := auth.Mint(auth.MintOptions{Issuer: is.Issuer, Audience: is.Audience, Subject: "frameworks", Dept: "dev",
		KID: is.Keys[0].KID, Key: []byte(is.Keys[0].Secret), Alg: is.Algorithms[0]}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return url, tok, js
}

// agentCLI returns the binary bin of the agent CLI that scripts/deps.sh
// installs with npm into $TOLLGATE_CACHE/cli/<dir> (TOLLGATE_CACHE
// defaulting to the user's cache dir's tollgate). The test skips with
// -short, and when the CLI is missing: it fails then with CI=true.
func agentCLI(t *testing.T, what, dir, bin string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: the %s test runs the CLI", what)
	}
	cache := os.Getenv("TOLLGATE_CACHE")
	if cache == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("no cache dir to find %s in: %v", what, err)
		}
		cache = filepath.Join(d, "tollgate")
	}
	path := filepath.Join(cache, "cli", dir, "node_modules", ".bin", bin)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed at %s: run scripts/deps.sh", what, path)
		}
		t.Skipf("%s not installed at %s: run scripts/deps.sh to run this test", what, path)
	}
	return path
}

// usageEvents reads every usage event in the stream.
func usageEvents(t *testing.T, js jetstream.JetStream) []*usagev1.UsageEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, usage.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []*usagev1.UsageEvent
	for {
		msg, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return got // no more: the publisher sends within milliseconds
		}
		var b usagev1.UsageBatch
		if err := usage.DecodeMessage(msg.Data(), &b); err != nil {
			t.Fatal(err)
		}
		got = append(got, b.Events...)
	}
}

// checkBilled checks that every request the clients made was billed with
// the provider's counts: a success on an API endpoint, not estimated, with
// prompt tokens. It returns the events.
func checkBilled(t *testing.T, js jetstream.JetStream) []*usagev1.UsageEvent {
	t.Helper()
	got := usageEvents(t, js)
	for _, ev := range got {
		if ev.StatusCode != 200 || ev.Estimated || ev.PromptTokens == 0 || !strings.HasPrefix(ev.Endpoint, "/v1/") {
			t.Errorf("usage event %s %s: status %d estimated %v prompt %d", ev.Endpoint, ev.RequestId, ev.StatusCode, ev.Estimated, ev.PromptTokens)
		}
	}
	if len(got) == 0 {
		t.Error("no usage events")
	}
	return got
}

// checkDeptTotal runs the budget consumer on the usage stream, as the
// budget service does, and checks that department dept's total is the sum
// of evs: as many requests, the same cost.
func checkDeptTotal(t *testing.T, js jetstream.JetStream, dept string, evs []*usagev1.UsageEvent) {
	t.Helper()
	var n uint64
	var cost int64
	for _, ev := range evs {
		if ev.Dept != dept {
			t.Errorf("usage event %s: dept %q, want %q", ev.RequestId, ev.Dept, dept)
		}
		n++
		cost += ev.CostNanoUsd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := budget.NewConsumer(js, budget.ConsumerOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = consumer.Run(cctx) }()
	defer func() { stop(); <-done }()
	w, err := kv.Watch(ctx, budget.TotalID{Scope: budget.ScopeDept, Value: dept, Period: budget.PeriodTotal}.Key())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var total usagev1.SpendTotal
	for e := range w.Updates() { // until the total includes every event, or the deadline
		if e == nil {
			continue // the initial values were sent
		}
		if err := proto.Unmarshal(e.Value(), &total); err != nil {
			t.Fatal(err)
		}
		if total.Requests == n && total.CostNanoUsd == cost {
			t.Logf("department %s: %d requests, %d nano-USD", dept, n, cost)
			return
		}
	}
	t.Errorf("department %s total: %d requests, %d nano-USD; the usage events: %d, %d nano-USD", dept, total.Requests, total.CostNanoUsd, n, cost)
}
