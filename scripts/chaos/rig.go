package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/procs"
	"github.com/tollgate/tollgate/pkg/revoke"
	"github.com/tollgate/tollgate/pkg/usage"
)

// Rig timings.
const (
	readyTimeout = 60 * time.Second
	stopGrace    = 15 * time.Second
	// shutdownGrace is the gateways' shutdown_grace.
	shutdownGrace = 10 * time.Second
	// syncInterval is the gateways' usage.sync_interval.
	syncInterval = 100 * time.Millisecond
)

// natsNode is one nats-server of the three-node cluster.
type natsNode struct {
	name    string
	port    int
	monitor int
	cfg     string
	p       *procs.Proc
}

func (n *natsNode) url() string        { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }
func (n *natsNode) monitorURL() string { return fmt.Sprintf("http://127.0.0.1:%d", n.monitor) }

// gatewayProc is one gateway instance; it restarts on the same ports,
// config and spool.
type gatewayProc struct {
	name  string
	port  int
	admin int
	cfg   string
	p     *procs.Proc
}

func (g *gatewayProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", g.port) }

// rig is every process of the multi-node setup, all on 127.0.0.1.
type rig struct {
	ps     *procs.Group
	root   string // repository root, for go build
	work   string // binaries, configs, stores, spools, logs
	bin    string
	secret string
	// natsBin is the nats-server binary the nodes run: -nats-server, or
	// when empty the version go.mod pins, built into bin with the services.
	natsBin string

	nats     [3]*natsNode
	ch       *chtest.Server
	mockAddr string
	mock     *procs.Proc
	budget   *procs.Proc
	analytic *procs.Proc
	gws      [2]*gatewayProc
	config   string // the shared config (budget, analytics, tollctl)
	refused  int    // a port nothing listens on

	nc *nats.Conn
	js jetstream.JetStream

	scan streamScan // what countStream has read of the usage stream so far
}

// natsURLs is the cluster's client URLs, comma-separated.
func (r *rig) natsURLs() string {
	var u []string
	for _, n := range r.nats {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// build compiles the services into r.bin.
func (r *rig) build(ctx context.Context) error {
	pkgs := []string{"./services/gateway", "./services/budget", "./services/analytics", "./services/mockllm", "./services/tollctl"}
	if r.natsBin == "" {
		pkgs = append(pkgs, "github.com/nats-io/nats-server/v2") // builds bin/nats-server
		r.natsBin = r.binPath("nats-server")
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", r.bin + string(os.PathSeparator)}, pkgs...)...)
	cmd.Dir = r.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	version, err := exec.CommandContext(ctx, r.natsBin, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", r.natsBin, err)
	}
	step("NATS nodes run %s (%s)", strings.TrimSpace(string(version)), r.natsBin)
	return nil
}

// start brings the whole rig up: NATS cluster, ClickHouse, mockllm, the
// budget and analytics services and two gateways.
func (r *rig) start(ctx context.Context) error {
	r.bin = filepath.Join(r.work, "bin")
	if err := os.MkdirAll(filepath.Join(r.work, "logs"), 0o755); err != nil {
		return fmt.Errorf("make work dir: %w", err)
	}
	r.ps = &procs.Group{LogDir: filepath.Join(r.work, "logs")}
	r.secret = randomHex(32)
	step("building the services")
	if err := r.build(ctx); err != nil {
		return err
	}
	step("starting a three-node NATS JetStream cluster")
	if err := r.startNATS(ctx); err != nil {
		return err
	}
	step("starting ClickHouse")
	ch, err := chtest.Launch()
	if err != nil {
		return fmt.Errorf("clickhouse: %w", err)
	}
	r.ch = ch
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	r.mockAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	r.refused = ports[1]
	r.gws[0] = &gatewayProc{name: "gateway-1", port: ports[2], admin: ports[3]}
	r.gws[1] = &gatewayProc{name: "gateway-2", port: ports[4], admin: ports[5]}
	if r.config, err = r.writeConfig("shared", 0, 0); err != nil {
		return err
	}
	step("starting mockllm, budget, analytics and two gateways")
	if r.mock, err = r.ps.Start("mockllm", procs.StartOptions{}, r.binPath("mockllm"), "-listen", r.mockAddr); err != nil {
		return err
	}
	if err := waitFor(ctx, "mockllm", r.mock, readyTimeout, func() bool { return httpOK("http://" + r.mockAddr + "/stats") }); err != nil {
		return err
	}
	for _, g := range r.gws {
		if g.cfg, err = r.writeConfig(g.name, g.port, g.admin); err != nil {
			return err
		}
		if err := r.startGateway(ctx, g); err != nil {
			return err
		}
	}
	if err := r.startBudget(); err != nil {
		return err
	}
	if err := r.startAnalytics(); err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	// Analytics applies the schema at start; counting rows needs the table.
	err = waitFor(ctx, "clickhouse schema", r.analytic, readyTimeout, func() bool {
		out, err := r.chQuery("EXISTS TABLE tollgate.usage_events")
		return err == nil && strings.TrimSpace(out) == "1"
	})
	if err != nil {
		return err
	}
	// The analytics lease bucket appears once the loader has started.
	var last error
	if err := waitFor(ctx, "replicated streams", nil, readyTimeout, func() bool {
		last = r.checkReplicas(ctx)
		return last == nil
	}); err != nil {
		return fmt.Errorf("%w: %w", err, last)
	}
	return nil
}

func (r *rig) binPath(name string) string { return filepath.Join(r.bin, name) }

// startNATS writes the three nodes' configs and starts them.
func (r *rig) startNATS(ctx context.Context) error {
	ports, err := freePorts(9)
	if err != nil {
		return err
	}
	for i := range r.nats {
		r.nats[i] = &natsNode{name: fmt.Sprintf("nats-%d", i+1), port: ports[3*i], monitor: ports[3*i+1]}
	}
	for i, n := range r.nats {
		var routes []string
		for j := range r.nats {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*j+2]))
			}
		}
		store := filepath.Join(r.work, n.name)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream { store_dir: %q }
cluster {
  name: tollgate-chaos
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, n.name, n.port, n.monitor, store, ports[3*i+2], strings.Join(routes, ", "))
		n.cfg = filepath.Join(r.work, n.name+".conf")
		if err := os.WriteFile(n.cfg, []byte(conf), 0o600); err != nil {
			return fmt.Errorf("write nats config: %w", err)
		}
	}
	for _, n := range r.nats {
		if n.p, err = r.ps.Start(n.name, procs.StartOptions{}, r.natsBin, "-c", n.cfg); err != nil {
			return err
		}
	}
	return r.waitNATS(ctx, r.nats[:]...)
}

// restartNATS starts the given (stopped) nodes again on their ports and
// stores and waits until the cluster is healthy.
func (r *rig) restartNATS(ctx context.Context, nodes ...*natsNode) error {
	var err error
	for _, n := range nodes {
		if n.p, err = r.ps.Start(n.name, procs.StartOptions{}, r.natsBin, "-c", n.cfg); err != nil {
			return err
		}
	}
	return r.waitNATS(ctx, nodes...)
}

// waitNATS waits until each node reports JetStream healthy and the cluster
// has a meta leader.
func (r *rig) waitNATS(ctx context.Context, nodes ...*natsNode) error {
	for _, n := range nodes {
		if err := waitFor(ctx, n.name, n.p, readyTimeout, func() bool { return httpOK(n.monitorURL() + "/healthz") }); err != nil {
			return err
		}
	}
	return waitFor(ctx, "jetstream meta leader", nil, readyTimeout, func() bool { return metaLeader(nodes[0].monitorURL()) != "" })
}

// metaLeader returns the JetStream meta leader a node knows of, or "".
func metaLeader(monitor string) string {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(monitor + "/jsz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Meta struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return ""
	}
	return v.Meta.Leader
}

// startGateway starts (or restarts) g and waits for /readyz.
func (r *rig) startGateway(ctx context.Context, g *gatewayProc) error {
	var err error
	if g.p, err = r.ps.Start(g.name, procs.StartOptions{}, r.binPath("gateway"), "-config", g.cfg); err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/readyz", g.addr())
	return waitFor(ctx, g.name, g.p, readyTimeout, func() bool { return httpOK(url) })
}

// startBudget starts (or restarts) the budget service.
func (r *rig) startBudget() error {
	var err error
	r.budget, err = r.ps.Start("budget", procs.StartOptions{}, r.binPath("budget"), "-config", r.config)
	return err
}

// startAnalytics starts (or restarts) the analytics service.
func (r *rig) startAnalytics() error {
	var err error
	r.analytic, err = r.ps.Start("analytics", procs.StartOptions{}, r.binPath("analytics"), "-config", r.config,
		"-clickhouse", r.ch.Addr(), "-database", "tollgate", "-batch-interval", "500ms")
	return err
}

// connect opens the rig's own NATS connection, used to count events.
func (r *rig) connect(ctx context.Context) error {
	nc, err := nats.Connect(r.natsURLs(), nats.Name("tollgate-chaos"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	r.nc, r.js = nc, js
	return nil
}

// requiredStreams are the streams the rig's services always create from
// the config's nats.replicas: the usage stream and the KV buckets of the
// budget service, the gateways' revocations and API keys, and the
// analytics lease, named by the constants of the packages that own them.
// checkReplicas checks these exist and that every stream on the cluster,
// these and any other (presence, leases, a cache bucket), has 3 replicas.
var requiredStreams = []string{usage.StreamName,
	kvStream(budget.Bucket), kvStream(budget.AlertBucket), kvStream(budget.DedupBucket),
	kvStream(revoke.Bucket), kvStream(apikey.Bucket), kvStream(chstore.DefaultLeaseBucket)}

// kvStream is the name of the stream that holds KV bucket b.
func kvStream(b string) string { return "KV_" + b }

// checkReplicas returns an error unless every required stream exists and
// every stream on the cluster has 3 replicas.
func (r *rig) checkReplicas(ctx context.Context) error {
	replicas := map[string]int{}
	names := r.js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := r.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		replicas[name] = s.CachedInfo().Config.Replicas
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list streams: %w", err)
	}
	return replicaProblem(replicas, requiredStreams, 3)
}

// replicaProblem returns an error naming a required stream that is
// missing or any stream whose replicas are not want.
func replicaProblem(replicas map[string]int, required []string, want int) error {
	for _, name := range required {
		if _, ok := replicas[name]; !ok {
			return fmt.Errorf("stream %s does not exist", name)
		}
	}
	names := make([]string, 0, len(replicas))
	for name := range replicas {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if n := replicas[name]; n != want {
			return fmt.Errorf("stream %s has %d replicas, want %d", name, n, want)
		}
	}
	return nil
}

// check returns an error when a long-running process died unexpectedly.
func (r *rig) check() error {
	list := []*procs.Proc{r.mock, r.budget, r.analytic}
	for _, n := range r.nats {
		list = append(list, n.p)
	}
	for _, g := range r.gws {
		list = append(list, g.p)
	}
	for _, p := range list {
		if p != nil && p.Exited() {
			return fmt.Errorf("%s (pid %d) exited:\n%s", p.Name(), p.PID(), p.LogTail())
		}
	}
	return nil
}

// close ends everything the rig started.
func (r *rig) close() error {
	if r.nc != nil {
		r.nc.Close()
	}
	var err error
	if r.ps != nil {
		err = r.ps.StopAll(stopGrace)
	}
	if r.ch != nil {
		if cerr := r.ch.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// token mints a token for dept, signed with the rig's issuer.
func (r *rig) token(dept string) (string, error) {
	tok, err := auth.Mint(auth.MintOptions{Issuer: "tollgate-chaos", Audience: "tollgate", Subject: "chaos-" + dept,
		Dept: dept, Team: "chaos", Project: "chaos", TTL: 2 * time.Hour, KID: "chaos-1", Key: []byte(r.secret)}, time.Now())
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	return tok, nil
}

// sigkill sends SIGKILL to p and waits for it to exit.
func sigkill(p *procs.Proc) error { return p.Kill() }

// sigterm sends SIGTERM to p without waiting.
func sigterm(p *procs.Proc) error { return p.Signal(syscall.SIGTERM) }

// randomHex returns n random bytes, hex encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
