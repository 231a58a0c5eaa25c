// Command budget runs the budget consumer (package pkg/budget): it folds the
// usage stream into the spend totals of the tollgate_spend KV bucket and
// raises threshold alerts, until SIGTERM or interrupt, when it finishes the
// batch it is writing and exits.
//
// It reads the nats, budgets and profiling sections of the shared config
// file; with a Pyroscope server configured it sends continuous profiles as
// application tollgate.budget.
// Several instances may run at once.
//
// main.go turns flags and environment into settings; app.go starts the
// program's parts from them, in order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
)

func main() {
	if err := run(os.Args[1:], os.Getenv); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "budget:", err)
		os.Exit(1)
	}
}

// run runs the program with args and the environment getenv until SIGTERM
// or interrupt.
func run(args []string, getenv func(string) string) error {
	s, err := parseSettings(args, getenv)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return s.run(ctx)
}

// settings is everything the program takes from its flags, its config file
// and its environment; nothing else reads them.
type settings struct {
	cfg      *config.Config
	limits   []budget.Limit
	consumer budget.ConsumerOptions
	metrics  string // address of the metrics listener; "" for none
	getenv   func(string) string
}

func parseSettings(args []string, getenv func(string) string) (settings, error) {
	s := settings{getenv: getenv}
	fs := flag.NewFlagSet("budget", flag.ContinueOnError)
	cfgPath := fs.String("config", "tollgate.yaml", "config file (uses its nats and budgets sections)")
	natsURL := fs.String("nats", "", "NATS URL; overrides the config's nats.url")
	budget.RegisterConsumerFlags(fs, &s.consumer)
	fs.StringVar(&s.metrics, "metrics", "", "address serving /metrics, e.g. 127.0.0.1:9102 (off when empty)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	cfg, err := config.LoadEnv(*cfgPath, getenv)
	if err != nil {
		return s, err
	}
	if *natsURL != "" {
		cfg.NATS.URL = *natsURL
	}
	if s.limits, err = budget.ParseLimits(cfg.Budgets); err != nil {
		return s, err
	}
	if err := budget.ValidateHierarchy(s.limits, cfg.BudgetOvercommit); err != nil {
		return s, err
	}
	s.cfg = cfg
	return s, nil
}
