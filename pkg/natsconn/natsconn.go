// Package natsconn connects Tollgate's programs to NATS: to an external
// server or cluster from the config's nats section, or to a JetStream
// server embedded in the process (gateway -embed).
package natsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	opts := append(common(name, log), nats.MaxReconnects(-1))
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

func common(name string, log *slog.Logger) []nats.Option {
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

// Embedded is a JetStream server running inside the process.
type Embedded struct {
	Server *server.Server
}

// Embed starts a JetStream server storing under dir. It listens on
// 127.0.0.1:port (port 0 or -1 picks a free one) so other local programs
// (tollctl, the budget and analytics services) can reach it too.
func Embed(dir string, port int) (*Embedded, error) {
	if port == 0 {
		port = -1
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "tollgate-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats: not ready after 10s")
	}
	return &Embedded{Server: ns}, nil
}

// Connect opens an in-process connection to the embedded server.
func (e *Embedded) Connect(name string, log *slog.Logger) (*nats.Conn, error) {
	opts := append(common(name, log), nats.InProcessServer(e.Server))
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return nc, nil
}

// URL is the embedded server's client URL on loopback.
func (e *Embedded) URL() string { return e.Server.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}

// Open connects name to NATS for the gateway. With dataDir set (-embed) it
// first starts a JetStream server in the process, storing under
// dataDir/nats and listening on 127.0.0.1:port (see Embed), and connects in
// process; otherwise it dials c (Connect). closeFn drains the connection,
// then stops the embedded server.
func Open(c config.NATS, dataDir string, port int, name string, log *slog.Logger) (nc *nats.Conn, closeFn func(), err error) {
	if dataDir == "" {
		if nc, err = Connect(c, name, log); err != nil {
			return nil, nil, err
		}
		return nc, func() { _ = nc.Drain() }, nil
	}
	store := filepath.Join(dataDir, "nats")
	e, err := Embed(store, port)
	if err != nil {
		return nil, nil, err
	}
	if nc, err = e.Connect(name, log); err != nil {
		e.Shutdown()
		return nil, nil, err
	}
	log.Info("embedded NATS JetStream started", "url", e.URL(), "store", store)
	return nc, func() { _ = nc.Drain(); e.Shutdown() }, nil
}
