//go:build !embed

package main

import (
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"
)

// errNoEmbed is what -embed gets from a gateway built without the embedded
// NATS server.
var errNoEmbed = errors.New("-embed needs a gateway built with -tags embed (go run -tags embed ./services/gateway -embed, or make run); this build connects to the NATS server of nats.url")

// openEmbedded refuses -embed: this build does not link the NATS server.
func openEmbedded(string, int, *slog.Logger) (*nats.Conn, func(), error) {
	return nil, nil, errNoEmbed
}
