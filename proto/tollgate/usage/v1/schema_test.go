package usagev1_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestFieldNumbersAreStable guards the wire format: events already in the
// stream must decode the same way after a schema change. Adding a field adds
// a row; changing a row's number is a breaking change.
func TestFieldNumbersAreStable(t *testing.T) {
	tests := []struct {
		name   string
		msg    proto.Message
		fields map[string]protoreflect.FieldNumber
	}{
		{
			name: "UsageEvent",
			msg:  &usagev1.UsageEvent{},
			fields: map[string]protoreflect.FieldNumber{
				"event_id": 1, "request_id": 2, "timestamp": 3,
				"issuer": 10, "subject": 11, "key_id": 12, "dept": 13, "team": 14, "project": 15,
				"requested_model": 20, "served_model": 21, "provider": 22, "deployment": 23,
				"attempts": 24, "fallbacks": 25, "route": 26, "hedged": 27,
				"prompt_tokens": 30, "completion_tokens": 31, "cached_tokens": 32,
				"reasoning_tokens": 33, "estimated": 34, "cache_write_tokens": 35, "service_tier": 42,
				"cost_nano_usd": 40, "pricing_version": 41,
				"endpoint": 50, "stream": 51, "status_code": 52, "error_type": 53, "client_aborted": 54,
				"latency_total_us": 60, "ttft_us": 61, "upstream_us": 62, "overhead_us": 63,
				"cache_hit": 70, "degradation_step": 71, "clamped_max_tokens": 72, "budgets": 73,
				"units": 74, "unit": 75, "recovered": 76,
			},
		},
		{
			name: "BudgetCheck",
			msg:  &usagev1.BudgetCheck{},
			fields: map[string]protoreflect.FieldNumber{
				"scope": 1, "value": 2, "period": 3, "period_start": 4, "from_token": 5,
				"limit_nano_usd": 6, "spent_nano_usd": 7, "reserved_nano_usd": 8, "headroom_nano_usd": 9,
			},
		},
		{
			name: "SpendTotal",
			msg:  &usagev1.SpendTotal{},
			fields: map[string]protoreflect.FieldNumber{
				"scope": 1, "value": 2, "period": 3, "period_start": 4,
				"cost_nano_usd": 10, "prompt_tokens": 11, "completion_tokens": 12, "requests": 13,
				"as_of_seq": 20, "updated_unix_ms": 21,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fds := tt.msg.ProtoReflect().Descriptor().Fields()
			if fds.Len() != len(tt.fields) {
				t.Errorf("%d fields, want %d: add the new field to this table", fds.Len(), len(tt.fields))
			}
			for name, num := range tt.fields {
				fd := fds.ByName(protoreflect.Name(name))
				if fd == nil {
					t.Errorf("field %s is missing", name)
					continue
				}
				if fd.Number() != num {
					t.Errorf("field %s is number %d, want %d", name, fd.Number(), num)
				}
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  proto.Message
		into proto.Message
	}{
		{
			name: "UsageEvent",
			msg: &usagev1.UsageEvent{
				EventId: "0193f0a2-7c4e-7d2a-9b1e-3f6a8c2d4e5f", RequestId: "req-1",
				Timestamp: 1_764_460_800_000_000_000, Subject: "alice", Dept: "eng",
				RequestedModel: "gpt-4o", ServedModel: "gpt-4o-2024-08-06", Provider: "openai",
				Deployment: "openai/gpt-4o", Attempts: 2, Fallbacks: []string{"azure/gpt-4o"},
				PromptTokens: 1200, CompletionTokens: 300, CachedTokens: 1024, ReasoningTokens: 100,
				CostNanoUsd: 4_999_500, PricingVersion: "2026-11-01", Endpoint: "/v1/chat/completions",
				Stream: true, StatusCode: 200, LatencyTotalUs: 812_000, TtftUs: 95_000,
				UpstreamUs: 800_000, OverheadUs: 12_000, ClampedMaxTokens: 512,
				Budgets: []*usagev1.BudgetCheck{{Scope: "dept", Value: "eng", Period: "month", PeriodStart: "2026-11",
					LimitNanoUsd: 500_000_000_000, SpentNanoUsd: 212_300_000_000, ReservedNanoUsd: 50_000_000,
					HeadroomNanoUsd: 287_700_000_000}},
			},
			into: &usagev1.UsageEvent{},
		},
		{
			name: "SpendTotal",
			msg: &usagev1.SpendTotal{
				Scope: "dept", Value: "eng", Period: "day", PeriodStart: "2026-11-30",
				CostNanoUsd: 12_345_678_901, PromptTokens: 10, CompletionTokens: 20, Requests: 3,
				AsOfSeq: 42, UpdatedUnixMs: 1_764_460_800_000,
			},
			into: &usagev1.SpendTotal{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.msg)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if err := proto.Unmarshal(b, tt.into); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if !proto.Equal(tt.msg, tt.into) {
				t.Errorf("round trip changed the message:\n got %v\nwant %v", tt.into, tt.msg)
			}
		})
	}
}
