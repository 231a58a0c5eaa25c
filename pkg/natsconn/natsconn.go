// Package natsconn connects Tollgate's programs to NATS: to a server or
// cluster from the config's nats section. A JetStream server embedded in
// the process (gateway -embed) is package natsembed, kept apart so that
// only a build that runs one links the server.
package natsconn

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/tollgate/tollgate/pkg/config"
)

// Connect dials the servers of c.URL (default nats://127.0.0.1:4222) with
// the configured credentials, NKey and TLS files, reconnecting forever.
func Connect(c config.NATS, name string, log *slog.Logger) (*nats.Conn, error) {
	url := c.URL
	if url == "" {
		url = nats.DefaultURL
	}
	opts := append(Options(name, log), nats.MaxReconnects(-1))
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", c.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	if c.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.TLS.CAFile))
	}
	if c.TLS.CertFile != "" || c.TLS.KeyFile != "" {
		opts = append(opts, nats.ClientCert(c.TLS.CertFile, c.TLS.KeyFile))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	return nc, nil
}

// Options are the options every Tollgate connection has: its name and the
// disconnect and reconnect logs.
func Options(name string, log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
}

// Open connects name to the servers of c for the gateway (Connect); closeFn
// drains the connection.
func Open(c config.NATS, name string, log *slog.Logger) (nc *nats.Conn, closeFn func(), err error) {
	if nc, err = Connect(c, name, log); err != nil {
		return nil, nil, err
	}
	return nc, func() { _ = nc.Drain() }, nil
}
