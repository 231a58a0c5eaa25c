package reconcile

import (
	"fmt"
	"strings"
)

// compare returns one line when got's requests or cost differ from want's;
// what names the figures compared when they are not the sources' headline
// ones ("" for those).
func compare(got, want Source, what string) []string {
	return compareFigures(got.Name, got.Requests, got.CostNanoUSD, want.Name, want.Requests, want.CostNanoUSD, what)
}

func compareFigures(gotName string, gotN, gotCost int64, wantName string, wantN, wantCost int64, what string) []string {
	if gotN == wantN && gotCost == wantCost {
		return nil
	}
	label := gotName
	if what != "" {
		label += " " + what
	}
	var parts []string
	if d := gotN - wantN; d != 0 {
		parts = append(parts, fmt.Sprintf("%s %s", count(abs(d), "request"), moreLess(d)))
	}
	if d := gotCost - wantCost; d != 0 {
		parts = append(parts, fmt.Sprintf("%d nano-USD %s", abs(d), map[bool]string{true: "more", false: "less"}[d > 0]))
	}
	return []string{fmt.Sprintf("%s: %s, %d nano-USD; %s: %s, %d nano-USD (%s has %s)",
		label, count(gotN, "request"), gotCost, wantName, count(wantN, "request"), wantCost, gotName, strings.Join(parts, " and "))}
}

// compareMock compares the mock's served answers with the stream's events
// billed from upstream usage.
func compareMock(mock, stream Source) []string {
	var out []string
	if n := mock.Extra["overflow"]; n > 0 {
		out = append(out, fmt.Sprintf("mock: %s not itemised (its ledger is full), so its cost is unknown", count(n, "answer")))
	}
	return append(out, compareFigures(SourceMock, mock.Requests, mock.CostNanoUSD,
		"stream billed from upstream usage", stream.Extra["served_requests"], stream.Extra["served_cost_nano_usd"], "served answers")...)
}

// compareBudgets compares the global totals with the stream's events, and
// the dept totals with its events that carry a dept.
func compareBudgets(b, stream Source) []string {
	out := compare(b, stream, "global totals")
	out = append(out, compareFigures(SourceBudgets, b.Extra["dept_requests"], b.Extra["dept_cost_nano_usd"],
		"stream", stream.Extra["dept_requests"], stream.Extra["dept_cost_nano_usd"], "dept totals")...)
	if dups := stream.Extra["legacy_duplicates"]; len(out) > 0 && dups > 0 {
		out = append(out, fmt.Sprintf("budgets: the stream holds %s of an event id already counted; the budget consumer adds every legacy single-event message, so the totals count each copy (a republished batch counts once)",
			count(dups, "duplicate message")))
	}
	return out
}

func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func moreLess(d int64) string {
	if d > 0 {
		return "more"
	}
	return "fewer"
}

func abs(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}
