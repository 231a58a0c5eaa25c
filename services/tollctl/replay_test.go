package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/replay"
	usagepkg "github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

func TestReplayNDJSON(t *testing.T) {
	ns, js := startUsageStream(t)
	ctx := context.Background()
	for i := range 5 {
		b, _ := proto.Marshal(&usagev1.UsageEvent{EventId: fmt.Sprintf("e%d", i), Dept: "eng", ServedModel: "gpt-4o",
			PromptTokens: 1_000_000, CostNanoUsd: 1, Timestamp: time.Now().UnixNano()})
		if _, err := js.Publish(ctx, usagepkg.Subject("eng"), b); err != nil {
			t.Fatal(err)
		}
	}
	prices := writeFile(t, t.TempDir(), "p.yaml", "version: \"v9\"\nprices:\n  gpt-4o: {input: \"2\", output: \"1\"}\n")
	tests := []struct {
		name  string
		args  []string
		lines int
		want  string
	}{
		{"seq range", []string{"--from-seq", "2", "--to-seq", "3"}, 2, `"event_id":"e1"`},
		{"since", []string{"--since", "1h"}, 5, `"event_id":"e4"`},
		{"reprice", []string{"--to-seq", "1", "--reprice", prices}, 1, `"cost_nano_usd":"2000000000"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"replay", "--nats", ns.ClientURL(), "--to", "ndjson"}, tc.args...)
			code, out, errOut := run1(t, nil, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if n := strings.Count(out, "\n"); n != tc.lines || !strings.Contains(out, tc.want) {
				t.Fatalf("%d lines, want %d containing %s:\n%s", n, tc.lines, tc.want, out)
			}
			if !strings.Contains(errOut, "replay 100.0%") || !strings.Contains(errOut, "replayed") {
				t.Fatalf("no progress lines: %s", errOut)
			}
		})
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, in string
		want     time.Time
		bad      bool
	}{
		{"empty", "", time.Time{}, false},
		{"days", "30d", now.AddDate(0, 0, -30), false},
		{"hours", "12h", now.Add(-12 * time.Hour), false},
		{"date", "2026-11-01", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), false},
		{"rfc3339", "2026-11-01T10:00:00Z", time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC), false},
		{"junk", "yesterday", time.Time{}, true},
		{"negative", "-5h", time.Time{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWhen(tc.in, now)
			if (err != nil) != tc.bad || !got.Equal(tc.want) {
				t.Fatalf("parseWhen(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	tests := []struct {
		name string
		p    replay.Progress
		bar  bool
		want string
	}{
		{"half", replay.Progress{Done: 50, Total: 100, Elapsed: 10 * time.Second}, false, "replay  50.0% 50/100 5 ev/s ETA 10s"},
		{"bar", replay.Progress{Done: 100, Total: 100, Elapsed: time.Second}, true, "[##############################] 100.0% 100/100 100 ev/s ETA 0s"},
		{"no time", replay.Progress{Done: 0, Total: 10}, false, "replay   0.0% 0/10 0 ev/s ETA ?"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressLine(tc.p, tc.bar); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
