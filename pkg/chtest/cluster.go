package chtest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterName is the name of the cluster a Cluster's servers form (their
// <remote_servers> entry), what chstore.Options.Cluster names.
const ClusterName = "tollgate"

// ErrNoZooKeeper is returned by StartCluster when Debian's zookeeper
// package (zkServer.sh and a Java runtime) is not installed.
var ErrNoZooKeeper = errors.New("zookeeper not found (apt-get install zookeeper default-jre-headless)")

// zkServer is where Debian's zookeeper package puts its start script.
const zkServer = "/usr/share/zookeeper/bin/zkServer.sh"

// zkReadyTimeout bounds how long ZooKeeper may take to answer (about 5s on
// two cores).
const zkReadyTimeout = 60 * time.Second

// Cluster is a replicated ClickHouse cluster on this machine: one
// ZooKeeper and shards × replicas servers, each a Server of its own
// (Kill, Start) with the macros {shard} = 01, 02, ... and {replica} = r1,
// r2, ... (numbered across the cluster), and distributed DDL (ON CLUSTER)
// under ZooKeeper.
type Cluster struct {
	// Servers are the servers, shard by shard, in the order of their
	// macros.
	Servers []*Server
	zk      *exec.Cmd
	zkDone  chan struct{}
}

// NewCluster starts ZooKeeper and shards × replicas servers for t, in
// t.TempDir(), and stops them when the test ends. Without clickhouse-server
// or ZooKeeper the test is skipped, or fails when CI=true.
func NewCluster(t testing.TB, shards, replicas int) *Cluster {
	t.Helper()
	c, err := startCluster(t.TempDir(), shards, replicas)
	if err != nil {
		if errors.Is(err, ErrNoZooKeeper) && os.Getenv("CI") != "true" {
			t.Skipf("chtest: %v (CI=true makes this fail)", err)
		}
		Fail(t, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("chtest: %v", err)
		}
	})
	return c
}

// Addrs returns the servers' native-protocol addresses, comma-separated,
// as chstore.Options.Addr takes them.
func (c *Cluster) Addrs() string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return strings.Join(addrs, ",")
}

// Close stops the servers, then ZooKeeper.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Stop())
	}
	if c.zk != nil {
		_ = c.zk.Process.Kill() // ZooKeeper keeps nothing the test needs
		<-c.zkDone
	}
	return errors.Join(errs...)
}

func startCluster(dir string, shards, replicas int) (*Cluster, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(zkServer); err != nil {
		return nil, ErrNoZooKeeper
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, ErrNoZooKeeper
	}
	n := shards * replicas
	ports, err := freePortList(1 + 3*n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	if err := c.startZooKeeper(filepath.Join(dir, "zk"), ports[0]); err != nil {
		return nil, err
	}
	for i := range n {
		p := ports[1+3*i:]
		c.Servers = append(c.Servers, &Server{bin: bin, dir: filepath.Join(dir, "ch"+strconv.Itoa(i+1)),
			tcpPort: p[0], httpPort: p[1], interPort: p[2]})
	}
	for i, s := range c.Servers {
		s.extra = clusterXML(ports[0], i, replicas, c.Servers)
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			c.Close()
			return nil, fmt.Errorf("chtest: make %s: %w", s.dir, err)
		}
		if err := s.writeConfig(); err != nil {
			c.Close()
			return nil, err
		}
		if err := s.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// startZooKeeper runs a standalone ZooKeeper on 127.0.0.1:port with its
// data under dir, and waits until it answers "imok".
func (c *Cluster) startZooKeeper(dir string, port int) error {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return fmt.Errorf("chtest: make %s: %w", dir, err)
	}
	cfg := fmt.Sprintf(`tickTime=500
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok
`, filepath.Join(dir, "data"), port)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("chtest: write zoo.cfg: %w", err)
	}
	out, err := os.Create(filepath.Join(dir, "zk.log"))
	if err != nil {
		return fmt.Errorf("chtest: open zookeeper log: %w", err)
	}
	cmd := exec.Command(zkServer, "start-foreground", cfgPath)
	cmd.Env = append(os.Environ(), "ZOO_LOG_DIR="+dir, "JVMFLAGS=-Xmx256m")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("chtest: start zookeeper: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	c.zk, c.zkDone = cmd, done
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(zkReadyTimeout)
	for !zkOK(addr) {
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(dir, "zk.log"))
			return fmt.Errorf("chtest: zookeeper exited during startup:\n%s", tail(b, 2048))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chtest: zookeeper on %s: no answer after %v", addr, zkReadyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// zkOK reports whether ZooKeeper at addr answers "ruok" with "imok".
func zkOK(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("ruok")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.HasPrefix(line, "imok")
}

// clusterXML is the config of server i of servers, replicas to a shard:
// ZooKeeper, its macros, the cluster of all servers and distributed DDL.
func clusterXML(zkPort, i, replicas int, servers []*Server) string {
	var b strings.Builder
	fmt.Fprintf(&b, `  <interserver_http_host>127.0.0.1</interserver_http_host>
  <interserver_http_port>%d</interserver_http_port>
  <zookeeper>
    <node><host>127.0.0.1</host><port>%d</port></node>
    <session_timeout_ms>10000</session_timeout_ms>
  </zookeeper>
  <macros><shard>%02d</shard><replica>r%d</replica></macros>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
  <remote_servers><%s>
`, servers[i].interPort, zkPort, i/replicas+1, i+1, ClusterName)
	for j, s := range servers {
		if j%replicas == 0 {
			b.WriteString("    <shard><internal_replication>true</internal_replication>\n")
		}
		fmt.Fprintf(&b, "      <replica><host>127.0.0.1</host><port>%d</port></replica>\n", s.tcpPort)
		if j%replicas == replicas-1 {
			b.WriteString("    </shard>\n")
		}
	}
	fmt.Fprintf(&b, "  </%s></remote_servers>\n", ClusterName)
	return b.String()
}

// clusterConfig returns the cluster elements of s's config, "" for a
// server of its own.
func (s *Server) clusterConfig() string { return s.extra }

// freePortList returns n ports free on 127.0.0.1 at the time of the call.
func freePortList(n int) ([]int, error) {
	ports := make([]int, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chtest: find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
