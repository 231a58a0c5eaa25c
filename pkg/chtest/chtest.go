// Package chtest starts throwaway ClickHouse servers for tests.
//
// Each server is a clickhouse-server process of its own, listening on
// 127.0.0.1 at free ports, with a config file, data directory and logs in a
// temporary directory, so it never touches the machine's own instance. The
// config is written to work on ClickHouse 18.16 (Debian's package) as well
// as current releases.
//
// A test that wants a server of its own calls Start (or New, for the Stop
// and Start controls of fault tests). A package whose tests share one server
// declares a Shared and closes it in TestMain:
//
//	var ch chtest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		ch.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { addr := ch.Addr(t); ... }
//
// Without a clickhouse-server binary, tests are skipped, or fail when the
// CI environment variable is "true".
package chtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrNoBinary is returned by Launch when no clickhouse-server binary is
// found on PATH, in /usr/bin or in /usr/sbin.
var ErrNoBinary = errors.New("clickhouse-server binary not found")

const (
	// readyTimeout bounds how long a server may take to answer its first ping.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long a server may take to exit after SIGTERM
	// before it is killed.
	stopTimeout = 15 * time.Second
	// launchAttempts is how often Launch retries with fresh ports when a
	// server exits during startup (another process took a port).
	launchAttempts = 3
)

// Server is one throwaway clickhouse-server process. Its methods are safe
// for concurrent use.
type Server struct {
	bin      string
	dir      string
	ownsDir  bool // Close removes dir
	tcpPort  int
	httpPort int
	// interPort, when set, is the replication (interserver HTTP) port and
	// extra the config elements of a cluster member (cluster.go).
	interPort int
	extra     string

	mu     sync.Mutex // guards cmd and exited
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Launch starts a server in a new temporary directory and returns once it
// answers. Close stops it and removes the directory. It is for TestMain
// and other code without a testing.TB; tests use Start or New.
func Launch() (*Server, error) {
	dir, err := os.MkdirTemp("", "chtest-")
	if err != nil {
		return nil, fmt.Errorf("chtest: make temp dir: %w", err)
	}
	s, err := launchIn(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.ownsDir = true
	return s, nil
}

// launchIn starts a server keeping everything under dir.
func launchIn(dir string) (*Server, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range launchAttempts {
		s := &Server{bin: bin, dir: dir}
		if s.tcpPort, s.httpPort, err = freePorts(); err != nil {
			return nil, err
		}
		if err := s.writeConfig(); err != nil {
			return nil, err
		}
		if lastErr = s.Start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// New starts a server for t in t.TempDir() and stops it when the test
// ends. Without a binary the test is skipped, or fails when CI=true.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := launchIn(t.TempDir())
	if err != nil {
		Fail(t, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("chtest: %v", err)
		}
	})
	return s
}

// Start starts a server for t (see New) and returns its native-protocol
// address, host:port.
func Start(t testing.TB) (addr string) {
	t.Helper()
	return New(t).Addr()
}

// Fail ends t because a server could not be started: t.Skip when the
// binary is missing and the CI environment variable is not "true", else
// t.Fatal.
func Fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skipf("chtest: %v (CI=true makes this fail)", err)
	}
	t.Fatalf("chtest: %v", err)
}

// Addr returns the server's native-protocol address, host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tcpPort))
}

// HTTPAddr returns the server's HTTP interface address, host:port.
func (s *Server) HTTPAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.httpPort))
}

// Dir returns the directory holding the server's config, data and logs.
func (s *Server) Dir() string { return s.dir }

// Start starts the server process, after Stop, on the same ports and data
// directory, and returns once it answers. Starting a running server does
// nothing.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		return nil
	}
	out, err := os.OpenFile(filepath.Join(s.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chtest: open stdout log: %w", err)
	}
	cmd := exec.Command(s.bin, "--config-file="+filepath.Join(s.dir, "config.xml"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("chtest: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a stopped server's exit status is not interesting
		out.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(exited); err != nil {
		s.stopLocked()
		return fmt.Errorf("chtest: clickhouse-server on %s: %w\n%s", s.Addr(), err, s.logTail())
	}
	return nil
}

// Stop sends SIGTERM to the server and waits for it to exit (killing it
// after 15s). Data stays, so Start brings the same server back. Stopping a
// stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit. Data stays, so Start brings the same server back.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return nil
	}
	defer func() { s.cmd = nil }()
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("chtest: kill clickhouse-server pid %d: %w", s.cmd.Process.Pid, err)
	}
	<-s.exited
	return nil
}

// Restart stops the server and starts it again on the same ports and data.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Close stops the server and removes its directory if Launch made it.
func (s *Server) Close() error {
	err := s.Stop()
	if s.ownsDir {
		if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
			err = fmt.Errorf("chtest: remove %s: %w", s.dir, rerr)
		}
	}
	return err
}

// running reports whether the process is alive; s.mu is held.
func (s *Server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *Server) stopLocked() error {
	if s.cmd == nil {
		return nil
	}
	defer func() { s.cmd = nil }()
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("chtest: signal clickhouse-server pid %d: %w", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = s.cmd.Process.Kill() // it ignored SIGTERM; Wait below tells the outcome
	<-s.exited
	return fmt.Errorf("chtest: clickhouse-server pid %d did not stop within %v; killed", s.cmd.Process.Pid, stopTimeout)
}

// waitReady polls the HTTP ping endpoint until it answers "Ok.".
func (s *Server) waitReady(exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + s.HTTPAddr() + "/ping"
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-exited:
			return errors.New("exited during startup")
		default:
		}
		if resp, err := client.Get(url); err == nil {
			ok := resp.StatusCode == http.StatusOK
			resp.Body.Close()
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %v", readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail returns the end of the server's error log and stdout, for
// startup errors.
func (s *Server) logTail() []byte {
	var out []byte
	for _, name := range []string{"log/error.log", "stdout.log"} {
		b, _ := os.ReadFile(filepath.Join(s.dir, name))
		out = append(out, tail(b, 2048)...)
	}
	return out
}

// Shared is one server shared by the tests of a package: started on the
// first call to Addr, stopped by Close (call it in TestMain after m.Run).
// The zero value is ready to use.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Addr returns the shared server's address, starting the server on first
// use. When it cannot start, t is skipped or failed as by Fail.
func (sh *Shared) Addr(t testing.TB) string {
	t.Helper()
	return sh.Server(t).Addr()
}

// Server returns the shared server, starting it on first use. Tests must
// not stop it; fault tests use a server of their own (New).
func (sh *Shared) Server(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() { sh.srv, sh.err = Launch() })
	if sh.err != nil {
		Fail(t, sh.err)
	}
	return sh.srv
}

// Close stops the shared server, if it was started, and removes its files.
func (sh *Shared) Close() error {
	sh.once.Do(func() {}) // no server may start after Close
	if sh.srv == nil {
		return nil
	}
	return sh.srv.Close()
}

// findBinary returns the clickhouse-server binary's path.
func findBinary() (string, error) {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/clickhouse-server", "/usr/sbin/clickhouse-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// freePorts returns two ports free on 127.0.0.1 at the time of the call.
func freePorts() (tcp, http int, err error) {
	var ports [2]int
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns[:i] {
				l.Close()
			}
			return 0, 0, fmt.Errorf("chtest: find a free port: %w", err)
		}
		lns[i] = ln
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	for _, l := range lns {
		l.Close()
	}
	return ports[0], ports[1], nil
}

// writeConfig writes config.xml and users.xml into s.dir. The root element
// <yandex> is what 18.16 reads; current releases accept it too. Idle client
// connections hold up a shutdown by up to keep_alive_timeout (HTTP) and
// poll_interval (native), 10s each by default: both are 1s here so that
// Stop takes about a second.
func (s *Server) writeConfig() error {
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(s.dir, sub), 0o755); err != nil {
			return fmt.Errorf("chtest: make %s: %w", sub, err)
		}
	}
	p := func(sub string) string { return filepath.Join(s.dir, sub) + "/" }
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>%s</log>
    <errorlog>%s</errorlog>
    <size>10M</size>
    <count>1</count>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>%d</tcp_port>
  <http_port>%d</http_port>
  <path>%s</path>
  <tmp_path>%s</tmp_path>
  <user_files_path>%s</user_files_path>
  <format_schema_path>%s</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <keep_alive_timeout>1</keep_alive_timeout>
  <shutdown_wait_unfinished>1</shutdown_wait_unfinished>
  <mlock_executable>false</mlock_executable>
%s</yandex>
`, filepath.Join(s.dir, "log", "server.log"), filepath.Join(s.dir, "log", "error.log"),
		s.tcpPort, s.httpPort, p("data"), p("tmp"), p("user_files"), p("format_schemas"), s.clusterConfig())
	users := `<?xml version="1.0"?>
<yandex>
  <profiles><default><poll_interval>1</poll_interval></default></profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default></default></quotas>
</yandex>
`
	if err := os.WriteFile(filepath.Join(s.dir, "config.xml"), []byte(config), 0o644); err != nil {
		return fmt.Errorf("chtest: write config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "users.xml"), []byte(users), 0o644); err != nil {
		return fmt.Errorf("chtest: write users: %w", err)
	}
	return nil
}

// tail returns at most the last n bytes of b, from a line start.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b
}
