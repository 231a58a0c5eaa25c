package main

import (
	"context"
	"fmt"
	"io"
	"net"
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

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestRun starts the program against a throwaway ClickHouse and an
// embedded NATS server, waits until published events are in ClickHouse and
// in the metrics, and until the config's budget limits are in
// budget_limits, before and after a reload, then stops it. It profiles to Pyroscope as
// tollgate.analytics ($PYROSCOPE_SERVER_ADDRESS).
func TestRun(t *testing.T) {
	var mu sync.Mutex
	var uploads []string
	pyroscope := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ingest" {
			mu.Lock()
			uploads = append(uploads, r.URL.Query().Get("name"))
			mu.Unlock()
		}
	}))
	t.Cleanup(pyroscope.Close)
	chAddr := chtest.Start(t)
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: chstore.DefaultStream, Subjects: []string{"tollgate.usage.>"}}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
	writeConfig(t, cfg, limitsBefore)
	metrics := freeAddr(t)
	env := map[string]string{"TOLLGATE_CLICKHOUSE": chAddr, "PYROSCOPE_SERVER_ADDRESS": pyroscope.URL}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	reload := make(chan os.Signal, 1)
	go func() {
		done <- run(runCtx, []string{"-config", cfg, "-nats", s.ClientURL(), "-database", "svc",
			"-batch-interval", "50ms", "-metrics", metrics}, func(k string) string { return env[k] }, reload)
	}()

	const events = 25
	for i := range events {
		data, err := proto.Marshal(&usagev1.UsageEvent{EventId: fmt.Sprintf("e%d", i), Timestamp: time.Now().UnixNano(),
			Dept: "eng", CostNanoUsd: 1_000_000_001})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "tollgate.usage.eng", data); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}, Auth: clickhouse.Auth{Database: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for {
		var n uint64
		var cost int64
		err := conn.QueryRow(ctx, "SELECT count(), sum(cost_nano_usd) FROM svc.usage_events").Scan(&n, &cost)
		if err == nil && n == events {
			if cost != events*1_000_000_001 {
				t.Fatalf("cost %d, want %d", cost, events*1_000_000_001)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v", err)
		case <-ctx.Done():
			t.Fatalf("events not loaded: %d rows, %v", n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The config's limits are in budget_limits at start, and the edited
	// file's after a reload (SIGHUP).
	waitLimits(ctx, t, conn, done, "at start", "dept * month 2000000000,dept eng month 10000000000,global  total 1000000000000")
	writeConfig(t, cfg, limitsAfter)
	reload <- syscall.SIGHUP
	waitLimits(ctx, t, conn, done, "after reload", "dept eng month 12500000000,team research/ml day 500000000")

	want := fmt.Sprintf("tollgate_analytics_rows_total %d", events)
	for {
		body, err := get("http://" + metrics + "/metrics")
		if err == nil && strings.Contains(body, want) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("metrics lack %q (%v):\n%s", want, err, body)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
	// Stopping uploads what was collected since the last upload.
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(uploads, func(n string) bool { return strings.HasPrefix(n, "tollgate.analytics{") }) {
		t.Errorf("profiles uploaded as %q, want tollgate.analytics", uploads)
	}
}

const (
	limitsBefore = `
  - {scope: dept, value: eng, amount_usd: "10", period: month}
  - {scope: dept, value: "*", amount_usd: "2", period: month}
  - {scope: global, amount_usd: "1000", period: total}
`
	limitsAfter = `
  - {scope: dept, value: eng, amount_usd: "12.5", period: month}
  - {scope: team, value: research/ml, amount_usd: "0.5", period: day}
`
)

// writeConfig writes a config file whose budgets section is budgets.
func writeConfig(t *testing.T, path, budgets string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("log:\n  level: warn\nbudgets:"+budgets), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitLimits waits until budget_limits_current holds want: "scope value
// period amount_nano_usd" rows ordered, joined by commas.
func waitLimits(ctx context.Context, t *testing.T, conn clickhouse.Conn, done <-chan error, when, want string) {
	t.Helper()
	var got string
	for {
		err := conn.QueryRow(ctx, `SELECT arrayStringConcat(groupArray(l), ',') FROM
			(SELECT concat(scope, ' ', value, ' ', period, ' ', toString(amount_nano_usd)) AS l
			 FROM svc.budget_limits_current ORDER BY scope, value, period)`).Scan(&got)
		if err == nil && got == want {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v", err)
		case <-ctx.Done():
			t.Fatalf("limits %s: %q (%v), want %q", when, got, err, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestRunFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "flag provided but not defined"},
		{name: "missing config file", args: []string{"-config", filepath.Join(t.TempDir(), "none.yaml")}, wantErr: "read config"},
		{name: "bad database name", args: []string{"-database", "a-b"}, wantErr: "database name"},
		{name: "bad batch interval", args: []string{"-batch-interval", "soon"}, wantErr: "invalid value"},
		{name: "bad cluster name", args: []string{"-config", configFile(t, "clickhouse:\n  cluster: \"a'b\"\n")}, wantErr: "cluster name"},
		{name: "bad replica path", args: []string{"-config", configFile(t, "clickhouse:\n  cluster: c\n  replica_path: tables\n")}, wantErr: "replica path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, func(string) string { return "" }, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// configFile writes a config file holding yaml and returns its path.
func configFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunMigrate checks that -migrate applies the schema and returns
// without NATS (none runs here).
func TestRunMigrate(t *testing.T) {
	addr := chtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"-migrate", "-clickhouse", addr, "-database", "migrate_only", "-nats", "nats://127.0.0.1:1"}
	if err := run(ctx, args, func(string) string { return "" }, nil); err != nil {
		t.Fatalf("run -migrate: %v", err)
	}
	st, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: "migrate_only"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	applied, err := st.AppliedMigrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := chstore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(ms) {
		t.Fatalf("applied %v, want all %d migrations", applied, len(ms))
	}
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
