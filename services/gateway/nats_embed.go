//go:build embed

package main

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/pkg/natsembed"
)

// openEmbedded starts the JetStream server of -embed in the process,
// storing under dataDir/nats and listening on 127.0.0.1:port, and connects
// to it. Built with -tags embed only: the server is most of what the
// default gateway would otherwise keep resident and never run.
func openEmbedded(dataDir string, port int, log *slog.Logger) (*nats.Conn, func(), error) {
	return natsembed.Open(dataDir, port, "tollgate-gateway", log)
}
