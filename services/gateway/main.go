// Command gateway is Tollgate's public endpoint: OpenAI-compatible API,
// JWT and API key auth, routing and streaming relay.
//
//	gateway [-config FILE] [-embed] [-data-dir DIR] [-nats-port N]
//
// The config file defaults to $TOLLGATE_CONFIG, else deploy/dev/tollgate.yaml.
// -embed, in a gateway built with -tags embed, runs the all-in-one mode
// (see docs/programs.md): an embedded NATS JetStream server, the budget consumer with
// the budget service's consumer flags (-webhook, -webhook-format,
// -forecast-alerts, -anomaly-factor, -fold-interval) and, built with -tags clickhouse and
// $TOLLGATE_CLICKHOUSE set, what the analytics service runs. GET
// /admin/usage reads the usage stream; built with -tags clickhouse it
// reads ClickHouse when $TOLLGATE_CLICKHOUSE is set.
//
// main.go turns flags and environment into settings; app.go starts the
// process's parts from them, in order, and states the shutdown order.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/tollgate/tollgate/pkg/budget"
)

func main() {
	s, err := parseSettings(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		err = s.run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// settings is everything the process takes from its flags and its
// environment (the config file is read by gateway.LoadSettings, which
// expands its ${VAR} references; the tracer reads the OTEL_EXPORTER_OTLP_*
// variables itself).
type settings struct {
	cfgPath  string
	embed    bool
	dataDir  string
	natsPort int
	consumer budget.ConsumerOptions // -embed's budget consumer
	getenv   func(string) string
}

func parseSettings(args []string, getenv func(string) string) (settings, error) {
	s := settings{getenv: getenv}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(&s.cfgPath, "config", cmp.Or(getenv("TOLLGATE_CONFIG"), "deploy/dev/tollgate.yaml"), "config file (env TOLLGATE_CONFIG)")
	fs.BoolVar(&s.embed, "embed", false, "all-in-one mode (a gateway built with -tags embed): embedded NATS JetStream, the budget consumer and (built with -tags clickhouse, $TOLLGATE_CLICKHOUSE set) the analytics loaders and budget_limits in this process")
	fs.StringVar(&s.dataDir, "data-dir", "data", "data directory for -embed (NATS store under nats/, usage spool under spool/)")
	fs.IntVar(&s.natsPort, "nats-port", 4222, "loopback port of the embedded NATS server with -embed (0 picks a free one)")
	budget.RegisterConsumerFlags(fs, &s.consumer)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if f := budget.ConsumerFlagSet(fs); f != "" && !s.embed {
		return s, fmt.Errorf("-%s is for the budget consumer of -embed; without -embed the budget service raises alerts", f)
	}
	return s, nil
}
