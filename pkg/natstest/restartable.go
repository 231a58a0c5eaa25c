package natstest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Binary is a nats-server process that a test can stop and start again on
// the same port and store, to simulate an outage.
type Binary struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	monitor int
	cmd     *exec.Cmd
	exited  chan struct{}
}

// NewBinary starts the nats-server binary with JetStream on a fixed free
// loopback port. Without the binary the test is skipped, or fails when CI
// is "true". The server is stopped when the test ends.
func NewBinary(t testing.TB) *Binary {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("natstest: nats-server binary not found on PATH: %v", err)
		}
		t.Skipf("natstest: nats-server binary not found on PATH (CI=true makes this fail): %v", err)
	}
	b := &Binary{t: t, bin: bin, dir: t.TempDir(), port: freePort(t), monitor: freePort(t)}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// URL is the client URL; it stays the same across restarts.
func (b *Binary) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", b.port) }

// Start runs the server (again) and waits until JetStream is ready.
func (b *Binary) Start() {
	b.t.Helper()
	if b.cmd != nil {
		return
	}
	logFile, err := os.OpenFile(filepath.Join(b.dir, "nats-server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	cmd := exec.Command(b.bin, "-a", "127.0.0.1", "-p", fmt.Sprint(b.port), "-m", fmt.Sprint(b.monitor),
		"-js", "-sd", filepath.Join(b.dir, "store"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		b.t.Fatalf("natstest: start nats-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	b.cmd, b.exited = cmd, exited
	client := &http.Client{Timeout: time.Second}
	monitorURL := fmt.Sprintf("http://127.0.0.1:%d", b.monitor)
	deadline := time.Now().Add(readyTimeout)
	for !healthy(client, monitorURL) {
		select {
		case <-exited:
			b.cmd = nil
			log, _ := os.ReadFile(filepath.Join(b.dir, "nats-server.log"))
			b.t.Fatalf("natstest: nats-server exited at start:\n%s", tail(log, 2048))
		default:
		}
		if time.Now().After(deadline) {
			b.Stop()
			b.t.Fatal("natstest: nats-server not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5 s) and waits.
func (b *Binary) Stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}
