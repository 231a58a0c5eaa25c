// Command capsim simulates the budget leases of a fleet of gateways (the
// model is in sim.go; docs/design/scale.md holds the capacity model this
// checks and its tables). It prints one Markdown table row per run.
//
//	go run ./scripts/capsim                      # the table of docs/design/scale.md
//	go run ./scripts/capsim -gateways 200 -totals 500 -rps 1000000
//	go run ./scripts/capsim -capacity                  # the capacity table
//	go run ./scripts/capsim -capacity -fold-interval 2s -loaders 40 -batch-size 100000
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("capsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := defaults()
	gateways := fs.String("gateways", "1,10,50,200", "gateway counts to run (comma-separated)")
	totals := fs.String("totals", "100,1000", "limited-total counts to run (comma-separated)")
	fs.Float64Var(&p.RPS, "rps", 1_000_000, "requests per second over the fleet")
	fs.Float64Var(&p.Zipf, "zipf", 1.1, "skew of requests over the limited totals (Zipf s)")
	fs.IntVar(&p.Seconds, "seconds", 10, "simulated seconds per run")
	fs.Int64Var(&p.CostNano, "cost", p.CostNano, "cost of one request, nano-USD")
	fs.Float64Var(&p.Fill, "fill", p.Fill, "each limit as a fraction of its total's expected spend over the run")
	fs.IntVar(&p.CASMs, "cas-ms", p.CASMs, "round trip of a KV write, ms")
	fs.IntVar(&p.WatchMs, "watch-ms", p.WatchMs, "delay before a committed write reaches the other gateways, ms")
	fs.IntVar(&p.FoldMs, "fold-ms", p.FoldMs, "budget fold interval, ms")
	fs.IntVar(&p.RefillMs, "refill-wait-ms", p.RefillMs, "RefillWait, ms")
	fs.IntVar(&p.LoopMs, "loop-ms", p.LoopMs, "refill loop period per gateway, ms")
	fs.Uint64Var(&p.Seed, "seed", 1, "random seed")
	capacity := fs.Bool("capacity", false, "print the capacity table of a fleet of -gateways (one count) at -rps instead of simulating leases")
	f := DefaultFleet()
	fs.DurationVar(&f.FoldInterval, "fold-interval", f.FoldInterval, "-capacity: budget fold interval")
	fs.IntVar(&f.Loaders, "loaders", f.Loaders, "-capacity: analytics loaders inserting at once")
	fs.IntVar(&f.LoaderBatch, "batch-size", f.LoaderBatch, "-capacity: events per ClickHouse insert")
	fs.IntVar(&f.ActiveScopes, "active-scopes", f.ActiveScopes, "-capacity: scope values (depts, teams, projects, subjects, keys) touched within one fold")
	fs.DurationVar(&f.MaxAge, "max-age", f.MaxAge, "-capacity: nats.max_age")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *capacity {
		n, err := strconv.Atoi(*gateways)
		if err != nil || n < 1 {
			fmt.Fprintln(stderr, "capsim: -capacity takes one -gateways count")
			return 2
		}
		f.Gateways, f.RPS = n, p.RPS
		printCapacity(stdout, f)
		return 0
	}
	gs, err1 := ints(*gateways)
	ts, err2 := ints(*totals)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(stderr, "capsim: -gateways and -totals are comma-separated counts")
		return 2
	}
	fmt.Fprintf(stdout, "%.0f req/s, %d s simulated, limits at %.0f%% of expected spend, CAS %d ms, watch %d ms, fold %d ms, RefillWait %d ms\n\n",
		p.RPS, p.Seconds, p.Fill*100, p.CASMs, p.WatchMs, p.FoldMs, p.RefillMs)
	fmt.Fprintln(stdout, "| gateways | limited totals | lease writes/s | on the hottest total | conflicts/s | requests that waited | wait p50 / p99 | refused | refused with headroom left | totals at their limit | over a limit |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range ts {
		for _, g := range gs {
			q := p
			q.Gateways, q.Totals = g, t
			r := Run(q)
			fmt.Fprintf(stdout, "| %d | %d | %.0f | %.0f | %.0f | %s | %.0f / %.0f ms | %s | %s | %d | %d nano-USD |\n",
				g, t, float64(r.Writes)/r.Seconds, r.HotWritesPerSec, float64(r.Conflicts)/r.Seconds,
				share(r.Waited, r.Requests), r.WaitP50, r.WaitP99, share(r.Refused, r.Requests),
				share(r.RefusedWithHeadroom, r.Requests), r.AtLimit, r.OverLimitNano)
		}
	}
	return 0
}

func defaults() Params {
	return Params{Gateways: 10, RPS: 1_000_000, Totals: 100, Zipf: 1.1, Seconds: 10, CostNano: 2_000_000, Fill: 0.7,
		CASMs: 2, WatchMs: 2, FoldMs: 200, RefillMs: 50, FirstMs: 1000, LoopMs: 10, Seed: 1, MaxRetries: 8}
}

func share(n, of int64) string {
	if of == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.3f%%)", n, 100*float64(n)/float64(of))
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
