package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/natstest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// pyroscopeServer records the application names of the profiles uploaded
// to it.
func pyroscopeServer(t *testing.T) (url string, names func() []string) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ingest" {
			mu.Lock()
			got = append(got, r.URL.Query().Get("name"))
			mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestRun starts the program against an embedded server, waits until an
// event is in the totals, then stops it with SIGTERM. It profiles to
// Pyroscope as tollgate.budget.
func TestRun(t *testing.T) {
	pyroscope, uploads := pyroscopeServer(t)
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: budget.Stream, Subjects: []string{"tollgate.usage.>"}}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
	yaml := "log:\n  level: warn\nbudgets:\n  - {scope: dept, value: eng, amount_usd: \"10\", period: month}\n" +
		"profiling:\n  server_address: " + pyroscope + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run([]string{"-config", cfg, "-nats", s.ClientURL()}, os.Getenv) }()

	data, err := proto.Marshal(&usagev1.UsageEvent{EventId: "e1", Timestamp: time.Now().UnixNano(), Dept: "eng", CostNanoUsd: 42})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "tollgate.usage.eng", data); err != nil {
		t.Fatal(err)
	}
	key := budget.TotalID{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodTotal}.Key()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kv, err := js.KeyValue(ctx, budget.Bucket)
		if err == nil {
			if e, err := kv.Get(ctx, key); err == nil {
				var st usagev1.SpendTotal
				if err := proto.Unmarshal(e.Value(), &st); err != nil {
					t.Fatal(err)
				}
				if st.CostNanoUsd != 42 {
					t.Fatalf("dept eng total = %d, want 42", st.CostNanoUsd)
				}
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("event never reached the totals")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop after SIGTERM")
	}
	// Stopping uploads what was collected since the last upload.
	if got := uploads(); !slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "tollgate.budget{") }) {
		t.Errorf("profiles uploaded as %q, want tollgate.budget", got)
	}
}
