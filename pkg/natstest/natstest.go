// Package natstest starts NATS servers with JetStream for tests: an
// embedded nats-server/v2 (Start) for unit tests, or the nats-server binary
// (StartBinary) for integration tests against a separate process. Servers
// listen on 127.0.0.1 at random ports, store into t.TempDir() and stop when
// the test ends.
package natstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// readyTimeout bounds how long a server may take to accept clients.
const readyTimeout = 10 * time.Second

// Start runs an embedded NATS server with JetStream on 127.0.0.1 at a
// random port, storing into t.TempDir(), without logging or signal
// handlers. It returns once the server accepts connections and shuts it
// down when the test ends. Its address is s.ClientURL().
func Start(t testing.TB) *server.Server {
	t.Helper()
	return start(t, server.RANDOM_PORT, t.TempDir())
}

// Restart shuts s (from Start) down and starts a server on the same port
// and JetStream store, as a restarted process would be: what s stored is
// there again, and clients that reconnect find it. It returns the new
// server, shut down when the test ends.
func Restart(t testing.TB, s *server.Server) *server.Server {
	t.Helper()
	port := s.Addr().(*net.TCPAddr).Port
	dir := filepath.Dir(s.StoreDir()) // StoreDir is the store's "jetstream" directory
	s.Shutdown()
	s.WaitForShutdown()
	return start(t, port, dir)
}

func start(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(readyTimeout) {
		t.Fatalf("natstest: server not ready after %v", readyTimeout)
	}
	return s
}

// Connect opens a client connection to s and closes it when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name("natstest"))
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// StartBinary runs the nats-server binary found on PATH with JetStream on
// 127.0.0.1 at a random port, storing into a temporary directory, and
// returns its client URL once JetStream is ready. stop terminates the
// server and waits for it to exit; it may be called early (to test an
// outage) and runs again, harmlessly, when the test ends. Without the
// binary the test is skipped, or fails when the CI environment variable is
// "true".
func StartBinary(t testing.TB) (url string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("natstest: nats-server binary not found on PATH: %v", err)
		}
		t.Skipf("natstest: nats-server binary not found on PATH (CI=true makes this fail): %v", err)
	}

	dir := t.TempDir()
	logPath := filepath.Join(dir, "nats-server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("natstest: create log: %v", err)
	}
	cmd := exec.Command(bin,
		"-a", "127.0.0.1", "-p", "-1", "-m", "-1",
		"-js", "-sd", filepath.Join(dir, "store"),
		"--ports_file_dir", dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("natstest: start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status of a stopped server is not interesting
		logFile.Close()
		close(exited)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(stop)

	url, err = waitReady(dir, exited)
	if err != nil {
		stop()
		log, _ := os.ReadFile(logPath)
		t.Fatalf("natstest: nats-server: %v\n%s", err, tail(log, 2048))
	}
	return url, stop
}

// ports is the ports file nats-server writes with --ports_file_dir.
type ports struct {
	NATS       []string `json:"nats"`
	Monitoring []string `json:"monitoring"`
}

// waitReady waits for the ports file in dir and for the monitoring health
// check to report JetStream ready, and returns the client URL.
func waitReady(dir string, exited <-chan struct{}) (string, error) {
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	var p ports
	for {
		select {
		case <-exited:
			return "", errors.New("exited during startup")
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("not ready after %v", readyTimeout)
		}
		if len(p.NATS) == 0 || len(p.Monitoring) == 0 {
			p = readPorts(dir)
		} else if healthy(client, p.Monitoring[0]) {
			return p.NATS[0], nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPorts reads the ports file in dir, returning zero ports until it
// exists and is complete.
func readPorts(dir string) ports {
	var p ports
	files, _ := filepath.Glob(filepath.Join(dir, "*.ports"))
	if len(files) == 1 {
		if b, err := os.ReadFile(files[0]); err == nil {
			_ = json.Unmarshal(b, &p) // a partly written file reads as empty
		}
	}
	return p
}

// healthy reports whether the server's health check passes with JetStream.
func healthy(c *http.Client, monitorURL string) bool {
	resp, err := c.Get(monitorURL + "/healthz?js-enabled-only=true")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// tail returns at most the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b
}

// CheckOpened fails t unless nc speaks JetStream and closeFn, the close
// function its opener returned, closes it within 5 seconds.
func CheckOpened(t testing.TB, nc *nats.Conn, closeFn func()) {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	closeFn()
	deadline := time.Now().Add(5 * time.Second)
	for !nc.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !nc.IsClosed() {
		t.Fatal("connection not closed")
	}
}

// Recreate calls create, which creates a stream deleted just before, until
// it succeeds, for up to 5 seconds, and fails t if it never does: right
// after a delete the server may still be removing the stream's store, and
// creating it again then fails ("error creating store for stream").
func Recreate(t testing.TB, create func() error) {
	t.Helper()
	err := create()
	for end := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
		err = create()
	}
	if err != nil {
		t.Fatalf("create the stream again: %v", err)
	}
}
