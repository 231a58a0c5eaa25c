package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/procs"
)

// Target names, in the order every scenario runs them.
const (
	targetDirect    = "direct"
	targetBareproxy = "bareproxy"
	targetTollgate  = "tollgate"
	// targetFallback is the gateway asked for a model whose only target
	// always answers 500, so every request is served by its fallback model.
	targetFallback = "tollgate-fallback"
)

// fallbackModel is the model of targetFallback.
const fallbackModel = "mock-gpt-fallback"

// allTargets is the interleaving order A B C.
func allTargets() []string { return []string{targetDirect, targetBareproxy, targetTollgate} }

// programs are the binaries the suite builds, by name, with their packages.
func programs() [][2]string {
	return [][2]string{
		{"gateway", "./services/gateway"},
		{"mockllm", "./services/mockllm"},
		{"loadgen", "./services/loadgen"},
		{"tollctl", "./services/tollctl"},
		{"budget", "./services/budget"},
		{"bareproxy", "./scripts/bench/bareproxy"},
	}
}

// build compiles every program into dir as the release image does
// (deploy/docker/Dockerfile): static (no cgo, so no C library mapped into
// each process), without file paths, symbol table or DWARF, so that the
// memory and start-up figures are those of the binaries we ship. The
// gateway of --embed is gateway-embed, built with -tags embed.
func build(ctx context.Context, root, dir string) error {
	all := []string{"-o", dir + string(os.PathSeparator)}
	for _, p := range programs() {
		all = append(all, p[1])
	}
	for _, args := range [][]string{all, {"-tags", "embed", "-o", filepath.Join(dir, "gateway-embed"), "./services/gateway"}} {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-ldflags=-s -w"}, args...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	return nil
}

// stack is the set of long-running processes every scenario uses:
// nats-server, the budget consumer and mockllm on the load CPU, bareproxy
// and the gateway on the gateway CPU.
type stack struct {
	ps      *procs.Group
	bin     string // directory of the built programs
	work    string // configs, stores and spools
	gwCPU   string // taskset CPU list; "" when not pinned
	loadCPU string // taskset CPU list; "" when not pinned

	secret   string
	token    string
	natsURL  string
	mockAddr string

	nats, budget, mock *procs.Proc
	bare, gw           instance
	fresh              int // counter for fresh instances
}

// instance is a started proxy: the bare proxy or a gateway.
type instance struct {
	p     *procs.Proc
	addr  string // public listener
	admin string // the gateway's admin listener (pprof)
	// took is the time from exec to the first proxied 200.
	took time.Duration
}

// chatProbe is a small valid chat request, the readiness probe of every
// target.
const chatProbe = `{"model":"mock-gpt","messages":[{"role":"user","content":"ready?"}]}`

// binPath returns the path of a built program.
func (s *stack) binPath(name string) string { return filepath.Join(s.bin, name) }

// startAll starts the shared processes and mints the token.
func (s *stack) startAll(ctx context.Context) error {
	s.secret = randomHex(32)
	if err := s.startNATS(ctx); err != nil {
		return err
	}
	mockPort, err := freePort()
	if err != nil {
		return err
	}
	s.mockAddr = fmt.Sprintf("127.0.0.1:%d", mockPort)
	s.mock, err = s.ps.Start("mockllm", procs.StartOptions{CPU: s.loadCPU}, s.binPath("mockllm"), "-listen", s.mockAddr)
	if err != nil {
		return err
	}
	if _, err := waitReady(ctx, s.mock, probe{url: "http://" + s.mockAddr + "/v1/chat/completions", body: []byte(chatProbe)}, time.Now(), 10*time.Second, 10*time.Millisecond); err != nil {
		return err
	}
	cfg, _, err := s.writeConfig("gateway", 0)
	if err != nil {
		return err
	}
	if err := s.mintToken(ctx, cfg); err != nil {
		return err
	}
	// The budget consumer folds usage events into the spend totals the
	// gateway watches, as in production; without it the gateway's pending
	// spend would only grow.
	s.budget, err = s.ps.Start("budget", procs.StartOptions{CPU: s.loadCPU}, s.binPath("budget"), "-config", cfg)
	if err != nil {
		return err
	}
	s.bare, err = s.startBareproxy(ctx, "bareproxy")
	if err != nil {
		return err
	}
	s.gw, err = s.startGateway(ctx, "gateway", false)
	return err
}

// startNATS runs a real nats-server with JetStream and a throwaway store.
func (s *stack) startNATS(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	mon, err := freePort()
	if err != nil {
		return err
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return fmt.Errorf("nats-server not found (apt-get install nats-server): %w", err)
	}
	store := filepath.Join(s.work, "nats")
	s.nats, err = s.ps.Start("nats-server", procs.StartOptions{CPU: s.loadCPU}, bin, "-a", "127.0.0.1", "-p", itoa(port), "-m", itoa(mon), "-js", "-sd", store)
	if err != nil {
		return err
	}
	s.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	_, err = waitReady(ctx, s.nats, probe{url: fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", mon)}, time.Now(), 10*time.Second, 10*time.Millisecond)
	return err
}

// mintToken mints the bench token with tollctl, the way users do.
func (s *stack) mintToken(ctx context.Context, cfg string) error {
	cmd := exec.CommandContext(ctx, s.binPath("tollctl"), "token", "--config", cfg, "--issuer", "bench",
		"--secret-env", "TOLLGATE_BENCH_SECRET", "--sub", "bench-user", "--dept", "bench", "--team", "bench",
		"--project", "bench", "--ttl", "6h")
	cmd.Env = append(os.Environ(), "TOLLGATE_BENCH_SECRET="+s.secret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("tollctl token: %w: %s", err, stderr.String())
	}
	s.token = strings.TrimSpace(string(out))
	if s.token == "" {
		return fmt.Errorf("tollctl token printed nothing")
	}
	return nil
}

// writeConfig writes a gateway config named name listening on port (0
// picks one) and returns its path and the admin listener's address. The full request path is on: an HS256
// issuer, a dept budget large enough never to refuse, a per-subject rate
// limit high enough never to refuse, usage events to the real NATS server.
func (s *stack) writeConfig(name string, port int) (string, string, error) {
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return "", "", err
		}
		port = p
	}
	admin, err := freePort()
	if err != nil {
		return "", "", err
	}
	spool := filepath.Join(s.work, name+"-spool")
	cfg := fmt.Sprintf(`# Generated by the benchmark suite.
listen: 127.0.0.1:%[1]d
shutdown_grace: 2s
admin: {listen: 127.0.0.1:%[2]d}
log: {format: json, level: warn, requests: false}
auth:
  issuers:
    - name: bench
      issuer: tollgate-bench
      audience: tollgate
      algorithms: [HS256]
      keys:
        - kid: bench-1
          secret: %[3]s
providers:
  - name: mock
    kind: openai
    base_url: http://%[4]s/v1
    api_key: bench-upstream-key
    # The bare proxy allows 16384 upstream connections; the hold scenario
    # needs 5,000.
    max_conns: 16384
  - name: mock-failing
    kind: openai
    base_url: http://%[4]s/v1
    api_key: bench-upstream-key
    max_conns: 16384
    headers: {X-Mock-Status: "500"}
models:
  - name: mock-gpt
    targets: [{provider: mock}]
  - name: mock-embed
    type: embeddings
    targets: [{provider: mock}]
  - name: %[7]s
    targets: [{provider: mock-failing, model: mock-gpt}]
    fallbacks: [mock-gpt]
# The breaker would skip the failing target after 5 failures; off, every
# request to %[7]s makes the failing call, then the fallback call.
routing:
  circuit: {failures: -1}
budgets:
  - {scope: dept, value: "*", amount_usd: "100000000", period: month}
rate_limits:
  - {scope: subject, value: "*", rpm: 1000000000, tpm: 1000000000000}
nats:
  url: %[5]s
usage:
  spool_dir: %[6]s
`, port, admin, s.secret, s.mockAddr, s.natsURL, spool, fallbackModel)
	path := filepath.Join(s.work, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", "", fmt.Errorf("write config: %w", err)
	}
	return path, fmt.Sprintf("127.0.0.1:%d", admin), nil
}

// startGateway starts a gateway named name with its own config (and, with
// embed, its own embedded NATS) and waits for its first proxied 200.
func (s *stack) startGateway(ctx context.Context, name string, embed bool) (instance, error) {
	port, err := freePort()
	if err != nil {
		return instance{}, err
	}
	cfg, admin, err := s.writeConfig(name, port)
	if err != nil {
		return instance{}, err
	}
	args, bin := []string{"-config", cfg}, "gateway"
	if embed {
		args, bin = append(args, "-embed", "-data-dir", filepath.Join(s.work, name+"-data"), "-nats-port", "0"), "gateway-embed"
	}
	in := instance{addr: fmt.Sprintf("127.0.0.1:%d", port), admin: admin}
	start := time.Now()
	in.p, err = s.ps.Start(name, procs.StartOptions{CPU: s.gwCPU}, s.binPath(bin), args...)
	if err != nil {
		return instance{}, err
	}
	return s.ready(ctx, in, start)
}

// startBareproxy starts a bare proxy in front of mockllm and waits for its
// first proxied 200.
func (s *stack) startBareproxy(ctx context.Context, name string) (instance, error) {
	port, err := freePort()
	if err != nil {
		return instance{}, err
	}
	in := instance{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	start := time.Now()
	in.p, err = s.ps.Start(name, procs.StartOptions{CPU: s.gwCPU}, s.binPath("bareproxy"), "-listen", in.addr, "-upstream", "http://"+s.mockAddr)
	if err != nil {
		return instance{}, err
	}
	return s.ready(ctx, in, start)
}

// ready waits for the first proxied 200 of in, started at start; on
// failure it stops the process.
func (s *stack) ready(ctx context.Context, in instance, start time.Time) (instance, error) {
	var err error
	in.took, err = waitReady(ctx, in.p, probe{url: "http://" + in.addr + "/v1/chat/completions", body: []byte(chatProbe), token: s.token}, start, 30*time.Second, time.Millisecond)
	if err != nil {
		_ = in.p.Stop(stopGrace)
		return instance{}, err
	}
	return in, nil
}

// startFresh starts a new instance of target for a scenario that needs a
// process with no history (memory, start-up).
func (s *stack) startFresh(ctx context.Context, target string, embed bool) (instance, error) {
	s.fresh++
	name := fmt.Sprintf("%s-fresh-%d", target, s.fresh)
	if target == targetBareproxy {
		return s.startBareproxy(ctx, name)
	}
	return s.startGateway(ctx, name, embed)
}

// addr returns the listen address of a shared target.
func (s *stack) addr(target string) string {
	switch target {
	case targetDirect:
		return s.mockAddr
	case targetBareproxy:
		return s.bare.addr
	}
	return s.gw.addr
}

// pid returns the process that serves a shared target.
func (s *stack) pid(target string) int {
	switch target {
	case targetDirect:
		return s.mock.PID()
	case targetBareproxy:
		return s.bare.p.PID()
	}
	return s.gw.p.PID()
}

// check returns an error when a shared process has died.
func (s *stack) check() error {
	for _, p := range []*procs.Proc{s.nats, s.budget, s.mock, s.bare.p, s.gw.p} {
		if p != nil && p.Exited() {
			return fmt.Errorf("%s (pid %d) exited: %v\n%s", p.Name(), p.PID(), p.Err(), p.LogTail())
		}
	}
	return nil
}

// randomHex returns n random bytes, hex encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
