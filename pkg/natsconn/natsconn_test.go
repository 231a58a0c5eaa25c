package natsconn

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
)

func TestConnectFailsClearly(t *testing.T) {
	start := time.Now()
	_, err := Connect(config.NATS{URL: "nats://127.0.0.1:1"}, "t", slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v to fail", time.Since(start))
	}
}

// TestOpen: Open connects to the configured server with JetStream and its
// closeFn drains and closes the connection.
func TestOpen(t *testing.T) {
	srv := natstest.Start(t)
	nc, closeFn, err := Open(config.NATS{URL: srv.ClientURL()}, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckOpened(t, nc, closeFn)
}
