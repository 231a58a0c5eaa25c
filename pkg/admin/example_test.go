package admin_test

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// A program wires the admin listener next to its public one and stops it on
// shutdown.
func Example() {
	var (
		cfg      = &config.Config{}
		reg      = prometheus.NewRegistry()
		verifier *auth.Verifier // from auth.NewVerifier(cfg.Auth, time.Now)
	)
	srv := admin.New(admin.Options{
		Gatherer: reg,
		Verify:   verifier.Verify,
		Ready:    func() error { return nil },
		Config:   func() *config.Config { return cfg },
		Reload:   func(context.Context) (any, error) { return map[string]int{"models": len(cfg.Models)}, nil },
		Logger:   slog.Default(),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0") // admin.DefaultAddr in a real program
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	// Output:
}
