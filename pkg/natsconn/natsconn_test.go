package natsconn

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tollgate/tollgate/pkg/config"
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
	tcp, err := Connect(config.NATS{URL: e.URL()}, "tcp", log)
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

func TestOpen(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	e, err := Embed(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	tests := []struct {
		name    string
		nats    config.NATS
		dataDir string
	}{
		{"embedded", config.NATS{}, t.TempDir()},
		{"external", config.NATS{URL: e.URL()}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, closeFn, err := Open(tt.nats, tt.dataDir, 0, "test", log)
			if err != nil {
				t.Fatal(err)
			}
			js, err := nc.JetStream()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.AccountInfo(); err != nil {
				t.Fatalf("jetstream: %v", err)
			}
			closeFn()
			deadline := time.Now().Add(5 * time.Second)
			for !nc.IsClosed() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !nc.IsClosed() {
				t.Fatal("connection not closed")
			}
		})
	}
}
