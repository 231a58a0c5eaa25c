package main

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/loadgen"
)

func TestResultAccounting(t *testing.T) {
	agreeing := counts{StreamMsgs: 100, StreamUnique: 100, StreamCost: 500, CHRows: 100, CHUnique: 100, CHCost: 500,
		BudgetRequests: 100, BudgetCost: 500}
	tests := []struct {
		name       string
		res        result
		lost, dups int64
		failures   []string // substrings, in order
	}{
		{name: "all agree", res: result{name: "nats-down", out: outcome{Answered: 100}, counts: agreeing}},
		{name: "answer without event", res: result{name: "nats-down", out: outcome{Answered: 103}, counts: agreeing},
			lost: 3, failures: []string{"3 events lost (allowed 0)"}},
		{name: "event missing in clickhouse", res: result{name: "clickhouse-down", out: outcome{Answered: 100},
			counts: with(agreeing, func(c *counts) { c.CHRows, c.CHUnique, c.CHCost = 99, 99, 495 })},
			lost: 1, failures: []string{"1 events lost", "cost differs"}},
		{name: "duplicate in stream and clickhouse", res: result{name: "nats-node-kill", out: outcome{Answered: 100},
			counts: with(agreeing, func(c *counts) { c.StreamMsgs, c.CHRows = 101, 102 })},
			dups: 3, failures: []string{"3 events duplicated"}},
		{name: "spend total counted twice", res: result{name: "consumers-kill", out: outcome{Answered: 100},
			counts: with(agreeing, func(c *counts) { c.BudgetRequests, c.BudgetCost = 101, 505 })},
			dups: 1, failures: []string{"1 events duplicated", "cost differs"}},
		{name: "loss within the gateway-kill bound", res: result{name: "gateway-kill", out: outcome{Answered: 104},
			counts: agreeing, lostBound: 4}, lost: 4},
		{name: "loss beyond the gateway-kill bound", res: result{name: "gateway-kill", out: outcome{Answered: 105},
			counts: agreeing, lostBound: 4}, lost: 5, failures: []string{"5 events lost (allowed 4)"}},
		{name: "client errors where none are promised", res: result{name: "nats-node-kill",
			out: outcome{Answered: 100, Errors: 2}, counts: agreeing}, failures: []string{"2 client errors"}},
		{name: "cut stream on sigterm", res: result{name: "gateway-term", out: outcome{Answered: 100}, counts: agreeing, cut: 1},
			failures: []string{"1 streams of gateway-1 cut"}},
		{name: "overshoot within bound", res: result{name: "budget-overshoot", out: outcome{Answered: 100}, counts: agreeing,
			overshoot: 90, overshootBound: 100}},
		{name: "overshoot beyond bound", res: result{name: "budget-overshoot", out: outcome{Answered: 100}, counts: agreeing,
			overshoot: 101, overshootBound: 100}, failures: []string{"overshoot 101 > bound 100"}},
		{name: "reconcile differs", res: result{name: "nats-down", out: outcome{Answered: 100}, counts: agreeing,
			reconcileDiffs: []string{"clickhouse: 99 requests", "mock served answers: 101 requests"}},
			failures: []string{"tollctl reconcile: 2 differences"}},
		{name: "reconcile mock difference documented", res: result{name: "upstream-faults", out: outcome{Answered: 100},
			counts: agreeing, reconcileDiffs: []string{"mock served answers: 120 requests"}}},
		{name: "reconcile stream difference not excused", res: result{name: "gateway-kill", out: outcome{Answered: 100},
			counts: agreeing, reconcileDiffs: []string{"mock served answers: 120 requests", "clickhouse: 99 requests"}},
			failures: []string{"tollctl reconcile: 1 differences"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.res.lost(); got != tt.lost {
				t.Errorf("lost = %d, want %d", got, tt.lost)
			}
			if got := tt.res.duplicated(); got != tt.dups {
				t.Errorf("duplicated = %d, want %d", got, tt.dups)
			}
			got := tt.res.failures()
			if len(got) != len(tt.failures) {
				t.Fatalf("failures = %q, want %d matching %q", got, len(tt.failures), tt.failures)
			}
			for i, want := range tt.failures {
				if !strings.Contains(got[i], want) {
					t.Errorf("failure %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

func with(c counts, f func(*counts)) counts {
	f(&c)
	return c
}

func TestOutcomeAdd(t *testing.T) {
	var o outcome
	o.add("a", &loadgen.Report{Requests: 10, Successes: 7, Errors: 3, ErrorsByKind: map[string]int64{"connect": 2, "status_5xx": 1},
		StatusCodes: map[string]int64{"200": 7, "502": 1}})
	o.add("b", &loadgen.Report{Requests: 5, Successes: 5, StatusCodes: map[string]int64{"200": 5}})
	if o.Sent != 15 || o.OK != 12 || o.Errors != 3 || o.Answered != 13 {
		t.Errorf("sent %d ok %d errors %d answered %d, want 15 12 3 13", o.Sent, o.OK, o.Errors, o.Answered)
	}
	if o.ErrorsByKind["connect"] != 2 || o.Status["200"] != 12 {
		t.Errorf("errors by kind %v, status %v", o.ErrorsByKind, o.Status)
	}
}

func TestWriteTable(t *testing.T) {
	results := []*result{
		{name: "nats-down", promise: "no loss | none", out: outcome{Sent: 10, OK: 10, Answered: 10},
			counts: counts{StreamMsgs: 10, StreamUnique: 10, CHRows: 10, CHUnique: 10, BudgetRequests: 10}},
		{name: "gateway-kill", out: outcome{Sent: 10, OK: 8, Errors: 2, Answered: 10},
			counts: counts{StreamMsgs: 7, StreamUnique: 7, CHRows: 7, CHUnique: 7, BudgetRequests: 7}, lostBound: 2},
		{name: "nats-node-kill", out: outcome{Sent: 5, OK: 5, Answered: 5}, err: errors.New("inject fault: context canceled")},
	}
	var b strings.Builder
	if err := writeTable(&b, results); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want 5:\n%s", len(lines), b.String())
	}
	tests := []struct {
		name string
		line int
		want string
	}{
		{"escaped pipe", 2, `no loss \| none`},
		{"kept", 2, "| yes |"},
		{"figures", 3, "| gateway-kill | 10 | 8 | 2 | 7 | 7 | 3 | 0 |"},
		{"broken", 3, "**NO**: 3 events lost (allowed 2)"},
		{"not reconciled after an error", 4, "| nats-node-kill | 5 | 5 | 0 | 0 | 0 | - | - |"},
		{"error shown", 4, "**NO**: inject fault: context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(lines[tt.line], tt.want) {
				t.Errorf("line %d = %q, want it to contain %q", tt.line, lines[tt.line], tt.want)
			}
		})
	}
}

func TestSelectScenarios(t *testing.T) {
	tests := []struct {
		name, list string
		want       []string
		err        string
	}{
		{name: "all by default", list: "", want: names(scenarios())},
		{name: "all by name", list: "all", want: names(scenarios())},
		{name: "one", list: "nats-down", want: []string{"nats-down"}},
		{name: "run order kept", list: "budget-overshoot,nats-node-kill", want: []string{"nats-node-kill", "budget-overshoot"}},
		{name: "unknown", list: "nats-down,typo", err: `unknown scenario "typo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectScenarios(tt.list)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(names(got), ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %v, want %v", names(got), tt.want)
			}
		})
	}
}

func names(s []scenario) []string {
	var out []string
	for _, sc := range s {
		out = append(out, sc.name)
	}
	return out
}

// TestReplicaProblem: the rig's replica check refuses a missing required
// stream and any stream on the cluster without 3 replicas, listed or not.
func TestReplicaProblem(t *testing.T) {
	all := map[string]int{}
	for _, name := range requiredStreams {
		all[name] = 3
	}
	with := func(name string, n int) map[string]int {
		m := maps.Clone(all)
		m[name] = n
		return m
	}
	missing := maps.Clone(all)
	delete(missing, kvStream(budget.DedupBucket))
	tests := []struct {
		name     string
		replicas map[string]int
		want     string // in the error; "" for none
	}{
		{"all required, all R3", all, ""},
		{"another bucket R3 too", with("KV_tollgate_cache", 3), ""},
		{"a required bucket R1", with(kvStream(apikey.Bucket), 1), "KV_tollgate_keys has 1 replicas"},
		{"an unlisted bucket R1", with("KV_tollgate_ratelimit_presence", 1), "KV_tollgate_ratelimit_presence has 1 replicas"},
		{"a required bucket missing", missing, "KV_tollgate_spend_dedup does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := replicaProblem(tt.replicas, requiredStreams, 3)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
	if len(requiredStreams) != 7 {
		t.Errorf("%d required streams, want the usage stream and 6 buckets", len(requiredStreams))
	}
}
