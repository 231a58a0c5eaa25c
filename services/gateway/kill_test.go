package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestKilledGatewayBillsWhatItBegan (issue #47): a gateway process (the
// built binary) relays 40 streams of mockllm (the built binary, 40 chunks
// 50 ms apart) after serving 10 non-stream requests; each stream has read
// half of its answer when the gateway is SIGKILLed, then restarted on
// the same config and spool. The budget service (the built binary) applies
// the stream to the spend totals. Every request mockllm began (its ledger:
// answers completed and streams cut) is billed exactly once: the dept's
// spend total counts 50 requests, the stream holds 50 distinct event ids,
// the 40 streams recovered and estimated.
func TestKilledGatewayBillsWhatItBegan(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, budget and mockllm programs")
	}
	const streams, calls, dept = 40, 10, "killed"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildPrograms(ctx, t, "gateway", "budget", "mockllm")
	ns := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}

	mockAddr, gwAddr := freeAddr(t), freeAddr(t)
	startProgram(t, filepath.Join(bin, "mockllm"), "-listen", mockAddr)
	waitHTTP(ctx, t, "http://"+mockAddr+"/stats")
	dir := t.TempDir()
	secret := "kill-test-secret-0123456789abcdef"
	cfg := filepath.Join(dir, "tollgate.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: %q
admin: {listen: "off"}
log: {format: json, level: info, requests: false}
auth:
  issuers:
    - {name: kill, issuer: kill-test, audience: tollgate, algorithms: [HS256], keys: [{kid: k1, secret: %s}]}
providers:
  - {name: mock, kind: openai, base_url: "http://%s/v1", api_key: upstream-key}
models:
  - {name: mock-gpt, targets: [{provider: mock}]}
prices:
  mock-gpt: {input: "1", output: "2"}
nats: {url: %q}
usage: {spool_dir: %q}
`, gwAddr, secret, mockAddr, ns.ClientURL(), filepath.Join(dir, "spool"))), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startProgram(t, filepath.Join(bin, "gateway"), "-config", cfg)
	waitHTTP(ctx, t, "http://"+gwAddr+"/readyz")
	startProgram(t, filepath.Join(bin, "budget"), "-config", cfg)
	tok, err := auth.Mint(auth.MintOptions{Issuer: "kill-test", Audience: "tollgate", Subject: "kill", Dept: dept, Team: "t",
		Project: "p", TTL: time.Hour, KID: "k1", Key: []byte(secret)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	post := func(ctx context.Context, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gwAddr+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		return http.DefaultClient.Do(req)
	}
	for range calls {
		resp, err := post(ctx, `{"model":"mock-gpt","messages":[{"role":"user","content":"hello"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("call: status %d", resp.StatusCode)
		}
	}

	// The streams: each client reads 20 chunks, then waits for the kill.
	var wg sync.WaitGroup
	read := make(chan error, streams)
	for range streams {
		wg.Go(func() {
			resp, err := post(ctx, `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"tell me"}],"mock":{"chunks":40,"chunk_delay_ms":50}}`)
			if err != nil {
				read <- err
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for seen := 0; seen < 20; {
				line, err := br.ReadString('\n')
				if err != nil {
					read <- fmt.Errorf("stream ended after %d chunks: %w", seen, err)
					return
				}
				if strings.HasPrefix(line, "data: ") {
					seen++
				}
			}
			read <- nil
			_, _ = io.Copy(io.Discard, br) // until the kill cuts it
		})
	}
	for range streams {
		if err := <-read; err != nil {
			t.Fatal(err)
		}
	}
	// Every stream is 1 s old: past the 100 ms after which a begun record
	// is written, and with a progress record (every 500 ms).
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	wg.Wait()
	startProgram(t, filepath.Join(bin, "gateway"), "-config", cfg)
	waitHTTP(ctx, t, "http://"+gwAddr+"/readyz")

	began := func() int64 {
		l, err := ledger(ctx, mockAddr)
		if err != nil {
			t.Fatal(err)
		}
		n := l.WithoutUsage + l.Incomplete + l.Overflow
		for _, a := range l.Answers {
			n += a.Count
		}
		return n
	}
	key := budget.TotalID{Scope: budget.ScopeDept, Value: dept, Period: budget.PeriodTotal}.Key()
	var total usagev1.SpendTotal
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		kv, err := js.KeyValue(ctx, budget.Bucket)
		if err == nil {
			if e, err := kv.Get(ctx, key); err == nil {
				if err := proto.Unmarshal(e.Value(), &total); err != nil {
					t.Fatal(err)
				}
			}
		}
		if total.GetRequests() >= streams+calls || time.Now().After(deadline) {
			break
		}
	}
	if b := began(); b != streams+calls || int64(total.GetRequests()) != b {
		t.Fatalf("mockllm began %d requests, the spend total bills %d; want %d both", b, total.GetRequests(), streams+calls)
	}

	evs := streamEvents(ctx, t, js)
	ids, recovered := map[string]int{}, 0
	var cost int64
	for _, ev := range evs {
		if ev.GetDept() != dept {
			continue
		}
		ids[ev.GetEventId()]++
		cost += ev.GetCostNanoUsd()
		if ev.GetRecovered() {
			recovered++
			if !ev.GetEstimated() || !ev.GetStream() || ev.GetCompletionTokens() == 0 || ev.GetCostNanoUsd() <= 0 {
				t.Errorf("recovered event %v", ev)
			}
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("event %s in the stream %d times", id, n)
		}
	}
	if len(ids) != streams+calls || recovered != streams || cost != total.GetCostNanoUsd() {
		t.Errorf("stream: %d events, %d recovered, cost %d; spend total cost %d; want %d, %d and equal costs",
			len(ids), recovered, cost, total.GetCostNanoUsd(), streams+calls, streams)
	}
}

// buildPrograms builds the named programs of services/ (or, for a name
// with a slash, the program at that path from here, such as
// ../../scripts/oidc-provider) into a temporary directory, each under its
// last path element.
func buildPrograms(ctx context.Context, t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		src := "../" + n
		if strings.Contains(n, "/") {
			src, n = n, filepath.Base(n)
		}
		buildProgram(ctx, t, filepath.Join(dir, n), src)
	}
	return dir
}

// buildProgram builds the program at src (a path from here) into out,
// with the build flags given (such as -tags clickhouse).
func buildProgram(ctx context.Context, t *testing.T, out, src string, flags ...string) {
	t.Helper()
	args := append(append([]string{"build"}, flags...), "-o", out, src)
	cmd := exec.CommandContext(ctx, "go", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", src, err, b)
	}
}

// startProgram starts bin with args, its output in the test's log when it
// fails, and kills it (by its id) when the test ends.
func startProgram(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	return startProgramEnv(t, nil, bin, args...)
}

// startProgramEnv is startProgram with env (KEY=VALUE) added to the
// test's environment.
func startProgramEnv(t *testing.T, env []string, bin string, args ...string) *exec.Cmd {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(bin)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("%s log (last 2000 bytes):\n%s", filepath.Base(bin), b[max(0, len(b)-2000):])
		}
		_ = log.Close()
	})
	return cmd
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered 200: %v", url, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ledger reads mockllm's ledger.
func ledger(ctx context.Context, addr string) (mockllm.Ledger, error) {
	var l mockllm.Ledger
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/ledger", nil)
	if err != nil {
		return l, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	return l, json.NewDecoder(resp.Body).Decode(&l)
}

// streamEvents returns every event of the usage stream.
func streamEvents(ctx context.Context, t *testing.T, js jetstream.JetStream) []*usagev1.UsageEvent {
	t.Helper()
	st, err := js.Stream(ctx, usage.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*usagev1.UsageEvent
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var b usagev1.UsageBatch
		if err := usage.DecodeMessage(m.Data, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Events...)
	}
	return out
}
