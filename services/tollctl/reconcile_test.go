package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/reconcile"
	usagepkg "github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// TestReconcileCommand runs `tollctl reconcile` against an embedded NATS
// server with the budget consumer and a mock upstream; the events stand for
// what a gateway would have published for the mock's answers.
func TestReconcileCommand(t *testing.T) {
	ns := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := usagepkg.EnsureStream(ctx, js, usagepkg.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := budget.NewConsumer(js, budget.ConsumerOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = consumer.Run(ctx) }()
	mock := mockllm.New(mockllm.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = mock.Serve(ln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	mockURL := "http://" + ln.Addr().String()

	price, _ := pricing.Default().Lookup("mock-gpt")
	var events []*usagev1.UsageEvent
	for i := range 3 {
		prompt, completion := askMock(t, mockURL, strings.Repeat("word ", i+1))
		ev := &usagev1.UsageEvent{EventId: usagepkg.NewEventID(time.Now()), Timestamp: time.Now().UnixNano(), Dept: "eng",
			RequestedModel: "mock-gpt", ServedModel: "mock-gpt", Provider: "mock", Attempts: 1, StatusCode: 200,
			PromptTokens: prompt, CompletionTokens: completion,
			CostNanoUsd: price.Cost(pricing.Usage{PromptTokens: prompt, CompletionTokens: completion})}
		publish(t, js, ev, ev.EventId)
		events = append(events, ev)
	}
	base := []string{"reconcile", "--nats", ns.ClientURL(), "--mock", mockURL}

	t.Run("agree, json", func(t *testing.T) {
		code, out, errOut := run1(t, nil, append(base, "--wait", "10s", "--json")...)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		rep := decodeReport(t, out)
		if !rep.OK || len(rep.Sources) != 3 || rep.Differences == nil {
			t.Fatalf("report %s", out)
		}
		for _, s := range rep.Sources {
			if s.Requests != 3 {
				t.Errorf("%s counts %d requests, want 3", s.Name, s.Requests)
			}
		}
	})

	t.Run("agree, table", func(t *testing.T) {
		code, out, errOut := run1(t, nil, base...)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		for _, want := range []string{"SOURCE", "COST NANO-USD", "stream", "budgets", "mock", "ok: every source agrees"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})

	t.Run("config prices the mock differently", func(t *testing.T) {
		cfg := writeFile(t, t.TempDir(), "tollgate.yaml", "prices:\n  mock-gpt: {input: \"1\", output: \"2\"}\n")
		code, out, _ := run1(t, nil, append(base, "--config", cfg, "--json")...)
		rep := decodeReport(t, out)
		if code != 1 || rep.OK || !strings.HasPrefix(strings.Join(rep.Differences, "\n"), "mock served answers:") {
			t.Fatalf("exit %d: %s", code, out)
		}
	})

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad since", append(base, "--since", "yesterday-ish"), "--since"},
		{"empty range", append(base, "--since", "1h", "--until", "2h"), "empty range"},
		{"unknown flag", append(base, "--frobnicate"), "frobnicate"},
		{"nats unreachable", []string{"reconcile", "--nats", "nats://127.0.0.1:1"}, "tollctl reconcile:"},
		{"clickhouse unreachable", append(base, "--clickhouse", "127.0.0.1:1"), "clickhouse"},
		{"clickhouse dsn scheme", append(base, "--clickhouse", "http://127.0.0.1:8123"), "native protocol"},
	}
	for _, tc := range tests {
		t.Run("error: "+tc.name, func(t *testing.T) {
			code, out, errOut := run1(t, nil, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want 2 and %q: %s%s", code, tc.want, out, errOut)
			}
		})
	}

	t.Run("duplicate counted twice by the budgets", func(t *testing.T) {
		publish(t, js, events[0], events[0].EventId+"-again")
		key := budget.TotalID{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal}.Key()
		testkit.Wait(t, 10*time.Second, "the budget consumer to apply the duplicate", func() bool {
			var tot usagev1.SpendTotal
			e, err := kv.Get(ctx, key)
			return err == nil && proto.Unmarshal(e.Value(), &tot) == nil && tot.Requests == 4
		})
		code, out, _ := run1(t, nil, append(base, "--json")...)
		rep := decodeReport(t, out)
		st, _ := rep.Source(reconcile.SourceStream)
		if code != 1 || rep.OK || st.Extra["duplicates"] != 1 || !strings.Contains(strings.Join(rep.Differences, "\n"), "budgets global totals: 4 requests") {
			t.Fatalf("exit %d: %s", code, out)
		}
		code, out, _ = run1(t, nil, base...)
		if code != 1 || !strings.Contains(out, "duplicates: 1") || !strings.Contains(out, "differences:") {
			t.Fatalf("exit %d: %s", code, out)
		}
	})
}

// askMock asks the mock one chat question and returns the usage it reports.
func askMock(t *testing.T, mockURL, content string) (prompt, completion uint64) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"mock-gpt","messages":[{"role":"user","content":%q}]}`, content)
	resp, err := http.Post(mockURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Usage struct {
			Prompt     uint64 `json:"prompt_tokens"`
			Completion uint64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Usage.Prompt == 0 {
		t.Fatalf("mock answer %s: %v", raw, err)
	}
	return out.Usage.Prompt, out.Usage.Completion
}

// startUsageStream starts an embedded NATS server with the usage stream.
func startUsageStream(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	ns := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := usagepkg.EnsureStream(context.Background(), js, usagepkg.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return ns, js
}

func publish(t *testing.T, js jetstream.JetStream, ev *usagev1.UsageEvent, msgID string) {
	t.Helper()
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), usagepkg.Subject(ev.Dept), b, jetstream.WithMsgID(msgID)); err != nil {
		t.Fatal(err)
	}
}

func decodeReport(t *testing.T, out string) reconcile.Report {
	t.Helper()
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not one JSON report: %v\n%s", err, out)
	}
	return rep
}
