package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/conformance"
)

// setupVerify is `tollctl verify --gateway URL --token T [--nats URL]`, T a
// JWT or an API key: the conformance kit (pkg/conformance) against a
// gateway routed at mockllm with the routes of deploy/verify.
func setupVerify(a *app, fs *pflag.FlagSet) func([]string) error {
	gw := fs.String("gateway", "http://127.0.0.1:8090", "the gateway's base URL (deploy/verify/tollgate.yaml listens on 127.0.0.1:8090)")
	token := fs.String("token", "", "a bearer token the gateway accepts for the verify-* models: a JWT or an API key (tg-...; tollctl keys create --models 'verify-*'); required")
	var nf natsFlags
	nf.register(a, fs)
	only := fs.String("case", "", "run only these cases (comma-separated names; see --list)")
	asJSON := jsonFlag(fs)
	list := fs.Bool("list", false, "list the cases and what each expects, then exit")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for the usage events after the last case")
	timeout := fs.Duration("timeout", 60*time.Second, "limit for one request")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		routes := conformance.DefaultRoutes()
		if *list {
			return conformance.WriteCases(a.stdout, routes)
		}
		if *token == "" {
			return fmt.Errorf("%w: give --token (tollctl token --config deploy/verify/tollgate.yaml --models 'verify-*' mints one)", errUsage)
		}
		var names []string
		for _, n := range strings.Split(*only, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if _, err := conformance.Select(routes, names); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		o := conformance.Options{Gateway: *gw, Token: *token, Cases: names, Wait: *wait,
			Client: &http.Client{Timeout: *timeout}}
		if nf.url != "" || nf.config != "" {
			nc, js, err := nf.connect()
			if err != nil {
				return fmt.Errorf("connect to NATS: %w", err)
			}
			defer nc.Close()
			o.JetStream = js
		}
		rep, err := conformance.Run(context.Background(), o)
		if err != nil {
			if errors.Is(err, conformance.ErrUnknownCase) {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			return err
		}
		if *asJSON {
			err = rep.WriteJSON(a.stdout)
		} else {
			err = rep.WriteTable(a.stdout)
		}
		if err != nil {
			return err
		}
		if !rep.OK {
			return errReported
		}
		return nil
	}
}
