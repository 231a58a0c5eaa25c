package usage

import (
	"testing"

	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestBatchEncodingCarriesEveryField: the hand-written batch encoding
// (appendBatch) and a legacy single-event message both decode, through
// DecodeMessage, to the events as published, token counts included
// (cache_write_tokens and service_tier among them).
func TestBatchEncodingCarriesEveryField(t *testing.T) {
	events := []*usagev1.UsageEvent{
		{EventId: "e1", RequestId: "r1", Dept: "research", ServedModel: "claude-sonnet-4-5", Provider: "claude",
			PromptTokens: 2112, CompletionTokens: 9, CachedTokens: 2000, CacheWriteTokens: 100, ReasoningTokens: 3,
			CostNanoUsd: 1_234_567, PricingVersion: "book-1", ServiceTier: "flex"},
		{EventId: "e2", RequestId: "r2", PromptTokens: 10, CacheWriteTokens: 10},
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
