//go:build !embed

package main

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// TestOpenNATS: a default build connects to nats.url, refuses a config
// without one, and refuses -embed with how to get a build that has it.
func TestOpenNATS(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	spool := "spool"
	if _, _, err := openNATS(config.NATS{}, &spool, true, t.TempDir(), 0, log); !errors.Is(err, errNoEmbed) {
		t.Fatalf("-embed in a default build: %v, want %v", err, errNoEmbed)
	}
	if _, _, err := openNATS(config.NATS{}, &spool, false, "", 0, log); err == nil {
		t.Fatal("no nats.url and no -embed: connected")
	}
	srv := natstest.Start(t)
	nc, closeFn, err := openNATS(config.NATS{URL: srv.ClientURL()}, &spool, false, "", 0, log)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckOpened(t, nc, closeFn)
}
