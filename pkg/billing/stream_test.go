package billing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestFromStream finds a request's event in the usage stream, whether it
// travelled as a legacy single-event message or inside a batch (stored
// twice, as after a republish), compressed as gateways publish batches by
// default or not.
func TestFromStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixNano()
	ev := func(req string, cost int64) *usagev1.UsageEvent {
		return &usagev1.UsageEvent{EventId: "ev-" + req, RequestId: req, Timestamp: ts, Dept: "eng", CostNanoUsd: cost}
	}
	pub := func(subject string, m proto.Message) {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
	pub(usage.SubjectPrefix+"eng", ev("r-legacy", 11))
	b := &usagev1.UsageBatch{ProducerId: "gwaaaaaaaaaaaaaa", Seq: 1, Events: []*usagev1.UsageEvent{ev("r-first", 21), ev("r-second", 22)}}
	pub(usage.BatchSubject(b.ProducerId), b)
	pub(usage.BatchSubject(b.ProducerId), b) // republished: a second copy in the stream
	zb := &usagev1.UsageBatch{ProducerId: "gwbbbbbbbbbbbbbb", Seq: 1}
	for i := range 30 {
		zb.Events = append(zb.Events, ev(fmt.Sprintf("r-compressed-%d", i), int64(40+i)))
	}
	plain, err := proto.Marshal(zb)
	if err != nil {
		t.Fatal(err)
	}
	z := usage.Compress(nil, plain)
	if !usage.Compressed(z) || bytes.Contains(z, []byte("r-compressed-17")) {
		t.Fatal("the batch was not compressed, or its request ids show through")
	}
	if _, err := js.Publish(ctx, usage.BatchSubject(zb.ProducerId), z); err != nil {
		t.Fatal(err)
	}
	pub(usage.SubjectPrefix+"eng", ev("r-last", 31))

	tests := []struct {
		id      string
		want    string // event id; "" for not found
		wantErr error
	}{
		{id: "r-legacy", want: "ev-r-legacy"},
		{id: "r-first", want: "ev-r-first"},
		{id: "r-second", want: "ev-r-second"},
		{id: "r-compressed-17", want: "ev-r-compressed-17"},
		{id: "r-last", want: "ev-r-last"},
		{id: "r-none", wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			c, err := FromStream(ctx, js, usage.StreamName, tt.id, time.Now().Add(-time.Hour))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.RequestID != tt.id || c.EventID != tt.want {
				t.Fatalf("charge of %s/%s, want %s/%s", c.RequestID, c.EventID, tt.id, tt.want)
			}
		})
	}
}
