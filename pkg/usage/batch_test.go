package usage

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestBatchEncodingCarriesEveryField: the hand-written batch encoding
// (appendBatch), that batch compressed as the publisher writes it, and a
// legacy single-event message all decode, through DecodeMessage and
// DecodeMessageAliased, to the events as published, token counts included
// (cache_write_tokens and service_tier among them).
func TestBatchEncodingCarriesEveryField(t *testing.T) {
	events := []*usagev1.UsageEvent{
		{EventId: "e1", RequestId: "r1", Dept: "research", ServedModel: "claude-sonnet-4-5", Provider: "claude",
			PromptTokens: 2112, CompletionTokens: 9, CachedTokens: 2000, CacheWriteTokens: 100, ReasoningTokens: 3,
			CostNanoUsd: 1_234_567, PricingVersion: "book-1", ServiceTier: "flex"},
		{EventId: "e2", RequestId: "r2", PromptTokens: 10, CacheWriteTokens: 10},
	}
	var many []*usagev1.UsageEvent
	for range 20 {
		many = append(many, events...)
	}
	tests := []struct {
		name string
		data func(t *testing.T) []byte
		want []*usagev1.UsageEvent
	}{
		{name: "batch", data: func(t *testing.T) []byte {
			b, bad := appendBatch(nil, "gw-1", &batch{head: batchHead{seq: 7, createdMs: 1}, events: events})
			if bad != 0 {
				t.Fatalf("%d events not encoded", bad)
			}
			return b
		}, want: events},
		{name: "compressed batch", data: func(t *testing.T) []byte {
			// Twenty copies of the events: a batch too small to shrink is
			// written plain (TestCompressedMessages).
			b, _ := appendBatch(nil, "gw-1", &batch{head: batchHead{seq: 7, createdMs: 1}, events: many})
			z := Compress([]byte("kept"), b)
			if string(z[:4]) != "kept" || !Compressed(z[4:]) {
				t.Fatalf("Compress did not append a compressed message: %q", z)
			}
			return z[4:]
		}, want: many},
		{name: "legacy single event", data: func(t *testing.T) []byte {
			b, err := proto.Marshal(events[0])
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, want: events[:1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b usagev1.UsageBatch
			data := tt.data(t)
			if err := DecodeMessage(data, &b); err != nil {
				t.Fatal(err)
			}
			// A producer's batch takes the UnmarshalVT path; a legacy event
			// goes straight to proto.Unmarshal.
			if fast := batchStart(data) && batchShape().valid(data); fast != (tt.name == "batch") {
				t.Errorf("decoded by UnmarshalVT: %v", fast)
			}
			if len(b.Events) != len(tt.want) {
				t.Fatalf("%d events, want %d", len(b.Events), len(tt.want))
			}
			var aliased usagev1.UsageBatch
			var plain []byte
			if err := DecodeMessageAliased(data, &aliased, &plain); err != nil || !proto.Equal(&aliased, &b) {
				t.Errorf("aliased decode %v (%v), want %v", &aliased, err, &b)
			}
			for i, ev := range b.Events {
				if !proto.Equal(ev, tt.want[i]) {
					t.Errorf("event %d = %v, want %v", i, ev, tt.want[i])
				}
			}
			if got := b.Events[0]; got.CacheWriteTokens != 100 || got.ServiceTier != "flex" {
				t.Errorf("cache_write_tokens = %d, service_tier = %q; want 100, flex", got.CacheWriteTokens, got.ServiceTier)
			}
		})
	}
}

// TestCompressedMessages: what Compress writes and DecodeMessage refuses.
// A batch that does not shrink is written plain, so a message never
// outgrows its batch; a damaged compressed message, or one claiming to
// expand past the largest batch, is ErrBadBatch, not a panic or a huge
// allocation.
func TestCompressedMessages(t *testing.T) {
	random := make([]byte, 4096)
	_, _ = rand.Read(random)
	ev := &usagev1.UsageEvent{EventId: "e1", Subject: string(random)} // bytes, not UTF-8: encoded by hand
	plain, _ := appendBatch(nil, "gw-1", &batch{head: batchHead{seq: 1}, events: []*usagev1.UsageEvent{ev}})
	if z := Compress(nil, plain); Compressed(z) || string(z) != string(plain) {
		t.Errorf("an incompressible batch: compressed %v, %d bytes from %d", Compressed(z), len(z), len(plain))
	}

	var evs []*usagev1.UsageEvent
	for range 50 {
		evs = append(evs, &usagev1.UsageEvent{EventId: "e1", Dept: "research", ServedModel: "gpt-4o-mini", Endpoint: "/v1/chat/completions"})
	}
	good, _ := appendBatch(nil, "gw-1", &batch{head: batchHead{seq: 1}, events: evs})
	z := Compress(nil, good)
	if !Compressed(z) {
		t.Fatal("a batch of repeated strings was not compressed")
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"cut", z[:len(z)-3]},
		{"mark only", []byte{compressedMark}},
		{"claims 8 MiB", append([]byte{compressedMark}, binary.AppendUvarint(nil, 8<<20)...)},
		{"not s2", []byte{compressedMark, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b usagev1.UsageBatch
			if err := DecodeMessage(tc.data, &b); !errors.Is(err, ErrBadBatch) {
				t.Errorf("DecodeMessage: %v, want ErrBadBatch", err)
			}
			var plain []byte
			if err := DecodeMessageAliased(tc.data, &b, &plain); !errors.Is(err, ErrBadBatch) || cap(plain) > 1<<20 {
				t.Errorf("DecodeMessageAliased: %v, want ErrBadBatch (buffer %d bytes)", err, cap(plain))
			}
		})
	}
}
