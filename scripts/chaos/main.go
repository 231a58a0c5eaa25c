// Command chaos runs Tollgate's reliability scenarios (`make test-chaos`):
// it builds the services, starts a multi-node rig on 127.0.0.1 (a
// three-node NATS JetStream cluster of nats-server processes, ClickHouse,
// mockllm, the budget and analytics services and two gateways, all on free
// ports with their data in a temporary directory), and runs fault
// scenarios under steady load. After each scenario it reconciles what the
// clients saw with the usage stream, ClickHouse and the spend totals, and
// at the end prints a markdown table of the results. It exits 1 when a
// scenario broke its promise (see RELIABILITY.md).
//
//	chaos [-scenario NAME[,NAME...]] [-keep] [-out FILE]
//
// Every process it starts is ended by its id when it returns, also after
// an error or Ctrl-C. It is a program, not a test: `go test ./...` never
// starts the rig.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
	}
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	only := fs.String("scenario", os.Getenv("SCENARIO"), "scenarios to run, comma-separated (default all; env SCENARIO)")
	keep := fs.Bool("keep", false, "keep the work directory (configs, logs, stores) after the run")
	outPath := fs.String("out", "", "also write the results table to this file")
	list := fs.Bool("list", false, "list the scenarios and exit")
	natsBin := fs.String("nats-server", "", "nats-server binary the NATS nodes run (default: the version go.mod pins, built with the services)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *list {
		for _, s := range scenarios() {
			fmt.Printf("%-18s %s\n", s.name, s.title)
		}
		return 0, nil
	}
	selected, err := selectScenarios(*only)
	if err != nil {
		return 2, err
	}
	root, err := os.Getwd()
	if err != nil {
		return 1, fmt.Errorf("working directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return 2, errors.New("run from the repository root (make test-chaos)")
	}
	work, err := os.MkdirTemp("", "tollgate-chaos-")
	if err != nil {
		return 1, fmt.Errorf("make work dir: %w", err)
	}
	r := &rig{root: root, work: work, natsBin: *natsBin}
	defer func() {
		step("stopping the rig")
		if err := r.close(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: stop:", err)
		}
		if *keep {
			fmt.Fprintln(os.Stderr, "chaos: work directory kept:", work)
		} else {
			_ = os.RemoveAll(work)
		}
	}()
	if err := r.start(ctx); err != nil {
		return 1, fmt.Errorf("start rig: %w (logs in %s)", err, filepath.Join(work, "logs"))
	}
	reconcile := r.hasReconcile(ctx)
	if !reconcile {
		step("tollctl has no reconcile command; the rig's own reconciliation only")
	}

	var results []*result
	for _, sc := range selected {
		if ctx.Err() != nil {
			break
		}
		res := &result{name: sc.name, title: sc.title, promise: sc.promise, dept: "chaos-" + sc.name}
		step("scenario %s: %s", sc.name, sc.title)
		start := time.Now()
		if err := r.resetMock(ctx); err != nil {
			res.err = err
		} else {
			res.err = sc.run(ctx, r, res)
		}
		if res.err == nil && reconcile {
			r.reconcile(ctx, res)
		}
		res.took = time.Since(start)
		results = append(results, res)
		verdict := "kept"
		if f := res.failures(); len(f) > 0 {
			verdict = "BROKEN: " + strings.Join(f, "; ")
		}
		step("scenario %s: %d sent, %d ok, %d answered, %d events, %d rows, %d lost, %d duplicated (%.0f s): %s",
			sc.name, res.out.Sent, res.out.OK, res.out.Answered, res.counts.StreamMsgs, res.counts.CHRows,
			res.lost(), res.duplicated(), res.took.Seconds(), verdict)
		if err := r.check(); err != nil {
			return 1, fmt.Errorf("rig broken after %s: %w", sc.name, err)
		}
	}

	var table strings.Builder
	if err := writeTable(&table, results); err != nil {
		return 1, err
	}
	fmt.Println()
	fmt.Print(table.String())
	if *outPath != "" {
		if err := os.WriteFile(*outPath, []byte(table.String()), 0o644); err != nil {
			return 1, fmt.Errorf("write results: %w", err)
		}
	}
	if ctx.Err() != nil {
		return 130, errors.New("interrupted")
	}
	for _, res := range results {
		if len(res.failures()) > 0 {
			return 1, nil
		}
	}
	return 0, nil
}

// step prints a progress line with the time.
func step(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s chaos: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}
