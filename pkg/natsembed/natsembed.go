// Package natsembed runs a NATS JetStream server inside the process, for
// the gateway's all-in-one mode (-embed, in a gateway built with
// -tags embed). It is the only package of the gateway's that links the
// NATS server, so a default build does not carry it.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/pkg/natsconn"
)

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
	opts := append(natsconn.Options(name, log), nats.InProcessServer(e.Server))
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

// Open starts a JetStream server in the process, storing under
// dataDir/nats and listening on 127.0.0.1:port (see Embed), and connects
// name to it in process. closeFn drains the connection, then stops the
// server.
func Open(dataDir string, port int, name string, log *slog.Logger) (nc *nats.Conn, closeFn func(), err error) {
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
