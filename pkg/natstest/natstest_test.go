package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/natstest"
)

// roundTrip creates a stream and a KV bucket on nc and reads back what it
// wrote, proving JetStream works.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "stream", run: func(t *testing.T) {
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
				t.Fatalf("create stream: %v", err)
			}
			ack, err := js.Publish(ctx, "t.x", []byte("hi"), jetstream.WithMsgID("id-1"))
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			dup, err := js.Publish(ctx, "t.x", []byte("hi"), jetstream.WithMsgID("id-1"))
			if err != nil || !dup.Duplicate || dup.Sequence != ack.Sequence {
				t.Fatalf("republish = %+v, %v; want duplicate of seq %d", dup, err, ack.Sequence)
			}
			s, err := js.Stream(ctx, "T")
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			msg, err := s.GetMsg(ctx, ack.Sequence)
			if err != nil || string(msg.Data) != "hi" {
				t.Fatalf("get msg = %v, %v; want hi", msg, err)
			}
		}},
		{name: "kv", run: func(t *testing.T) {
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
			if err != nil {
				t.Fatalf("create kv: %v", err)
			}
			if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatalf("put: %v", err)
			}
			e, err := kv.Get(ctx, "k")
			if err != nil || string(e.Value()) != "v" {
				t.Fatalf("get = %v, %v; want v", e, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

func TestStart(t *testing.T) {
	s := natstest.Start(t)
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream is not enabled")
	}
	roundTrip(t, natstest.Connect(t, s))
}

func TestStartBinary(t *testing.T) {
	url, stop := natstest.StartBinary(t)
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer nc.Close()
	roundTrip(t, nc)

	stop()
	if _, err := nats.Connect(url); err == nil {
		t.Error("connect after stop succeeded")
	}
	stop() // a second stop is harmless
}
