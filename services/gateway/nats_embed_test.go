//go:build embed

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// TestOpenNATSEmbedded: with -embed, a gateway built with -tags embed
// starts its own JetStream server storing under DATA/nats, ignores
// nats.url, and moves the usage spool to DATA/spool.
func TestOpenNATSEmbedded(t *testing.T) {
	dir := t.TempDir()
	spool := "spool"
	nc, closeFn, err := openNATS(config.NATS{URL: "nats://127.0.0.1:1"}, &spool, true, dir, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "spool"); spool != want {
		t.Errorf("spool dir %q, want %q", spool, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "nats")); err != nil {
		t.Errorf("no NATS store under the data dir: %v", err)
	}
	natstest.CheckOpened(t, nc, closeFn)
}
