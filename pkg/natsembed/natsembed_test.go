package natsembed

import (
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/natstest"
)

func TestEmbedPersistsAndConnects(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	e, err := Embed(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := e.Connect("test", log)
	if err != nil {
		t.Fatal(err)
	}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A client over TCP reaches the same server.
	tcp, err := natsconn.Connect(config.NATS{URL: e.URL()}, "tcp", log)
	if err != nil {
		t.Fatal(err)
	}
	tcp.Close()
	nc.Close()
	e.Shutdown()

	// Restarted on the same directory, the data is still there.
	e2, err := Embed(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Shutdown()
	nc2, err := e2.Connect("test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := nc2.JetStream()
	kv2, err := js2.KeyValue("t")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv2.Get("k")
	if err != nil || string(entry.Value()) != "v" {
		t.Fatalf("value after restart: %v %v", entry, err)
	}
}

// TestOpen: Open starts a server under dataDir/nats that speaks JetStream,
// and its closeFn drains the connection and stops the server.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	nc, closeFn, err := Open(dir, 0, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckOpened(t, nc, closeFn)
	// Stopped, the directory is free for the next start.
	nc2, closeFn2, err := Open(dir, 0, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("restart on the same directory: %v", err)
	}
	natstest.CheckOpened(t, nc2, closeFn2)
}
