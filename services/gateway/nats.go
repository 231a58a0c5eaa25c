package main

import (
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natsconn"
)

// openNATS connects the gateway to NATS: with embed to the JetStream server
// it starts in the process (openEmbedded; the usage spool then lives under
// dataDir/spool), otherwise to the servers of c. closeFn drains the
// connection and stops an embedded server.
func openNATS(c config.NATS, spoolDir *string, embed bool, dataDir string, port int, log *slog.Logger) (*nats.Conn, func(), error) {
	if embed {
		*spoolDir = filepath.Join(dataDir, "spool")
		return openEmbedded(dataDir, port, log)
	}
	if c.URL == "" {
		return nil, nil, errors.New("usage events need NATS: set nats.url in the config, or run with -embed")
	}
	return natsconn.Open(c, "tollgate-gateway", log)
}
