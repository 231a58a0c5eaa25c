package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is what one scenario measured and whether it kept its promise.
type result struct {
	name, title, promise string
	dept                 string
	since, until         time.Time
	took                 time.Duration

	out    outcome
	counts counts

	// cut counts streams of the signalled gateway that ended early.
	cut int64
	// lostBound is the most events the scenario may lose; boundText says
	// how it was derived. Zero for every scenario but gateway-kill.
	lostBound int64
	boundText string
	// began is what mockllm's ledger counts (answers it completed and
	// streams cut), compared with the events in the stream when
	// checkBegan is set (gateway-kill-streams).
	began      int64
	checkBegan bool
	// unexpectedErrors counts client errors the scenario promised away.
	unexpectedErrors int64
	// overshoot and overshootBound are the budget scenario's figures.
	overshoot, overshootBound int64
	// reconcile is tollctl reconcile's verdict for the table: "ok",
	// "differ: ..." or why it did not run; reconcileDiffs its differences.
	reconcile      string
	reconcileDiffs []string

	notes []string
	err   error
}

func (res *result) note(format string, a ...any) {
	res.notes = append(res.notes, fmt.Sprintf(format, a...))
}

// lost counts events missing somewhere: answers without an event in the
// stream, and stream events missing from ClickHouse or the spend total.
func (res *result) lost() int64 {
	c := res.counts
	return max(res.out.Answered-c.StreamUnique, 0) + max(c.StreamUnique-c.CHUnique, 0) + max(c.StreamUnique-c.BudgetRequests, 0)
}

// duplicated counts events stored more than once: extra stream messages,
// extra ClickHouse rows, and spend totals counting more requests than the
// stream holds.
func (res *result) duplicated() int64 {
	c := res.counts
	return (c.StreamMsgs - c.StreamUnique) + (c.CHRows - c.CHUnique) + max(c.CHUnique-c.StreamUnique, 0) +
		max(c.BudgetRequests-c.StreamUnique, 0)
}

// unanswered counts events of requests whose client saw no status (a
// connection cut by a dying gateway after the request was served).
func (res *result) unanswered() int64 { return max(res.counts.StreamUnique-res.out.Answered, 0) }

// failures lists the ways the scenario broke its promise; empty means kept.
func (res *result) failures() []string {
	var f []string
	if res.err != nil {
		return []string{res.err.Error()}
	}
	if l := res.lost(); l > res.lostBound {
		f = append(f, fmt.Sprintf("%d events lost (allowed %d)", l, res.lostBound))
	}
	if d := res.duplicated(); d > 0 {
		f = append(f, fmt.Sprintf("%d events duplicated", d))
	}
	c := res.counts
	if c.StreamCost != c.CHCost || c.StreamCost != c.BudgetCost {
		f = append(f, fmt.Sprintf("cost differs: stream %d, clickhouse %d, budgets %d nano-USD", c.StreamCost, c.CHCost, c.BudgetCost))
	}
	switch res.name {
	case "nats-node-kill", "nats-down", "clickhouse-down", "consumers-kill":
		if res.out.Errors > 0 {
			f = append(f, fmt.Sprintf("%d client errors", res.out.Errors))
		}
	case "gateway-term":
		if res.cut > 0 {
			f = append(f, fmt.Sprintf("%d streams of gateway-1 cut", res.cut))
		}
	case "upstream-faults":
		if res.unexpectedErrors > 0 {
			f = append(f, fmt.Sprintf("%d client errors other than error events of cut or garbled streams", res.unexpectedErrors))
		}
	case "gateway-kill-streams":
		if res.checkBegan && res.began != res.counts.StreamUnique {
			f = append(f, fmt.Sprintf("mockllm began %d requests, the stream bills %d", res.began, res.counts.StreamUnique))
		}
		if res.counts.StreamRecovered == 0 {
			f = append(f, "no event recovered: no stream was in flight at the kill")
		}
	case "budget-overshoot":
		if res.overshoot > res.overshootBound {
			f = append(f, fmt.Sprintf("overshoot %d > bound %d nano-USD", res.overshoot, res.overshootBound))
		}
	}
	if n := res.unexplainedDiffs(); n > 0 {
		f = append(f, fmt.Sprintf("tollctl reconcile: %d differences", n))
	}
	return f
}

// unexplainedDiffs counts tollctl reconcile's differences other than
// those the scenario documents: in gateway-kill the mock served requests
// the killed gateway never billed, in upstream-faults it completed slow
// answers the gateway had given up on (as a provider's invoice would).
func (res *result) unexplainedDiffs() int {
	n := 0
	for _, d := range res.reconcileDiffs {
		mock := strings.HasPrefix(d, "mock")
		if mock && (res.name == "gateway-kill" || res.name == "upstream-faults") {
			continue
		}
		n++
	}
	return n
}

// measured is the one-line summary of what the scenario saw.
func (res *result) measured() string {
	var parts []string
	if res.err != nil {
		return "error: " + res.err.Error()
	}
	for _, name := range sortedKeys(res.out.ByLoad) {
		rep := res.out.ByLoad[name]
		if rep.Errors == 0 {
			continue
		}
		var kinds []string
		for _, k := range sortedKeys(rep.ErrorsByKind) {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, rep.ErrorsByKind[k]))
		}
		parts = append(parts, fmt.Sprintf("%s: %s", name, strings.Join(kinds, " ")))
	}
	if res.boundText != "" {
		parts = append(parts, "lost "+res.boundText)
	}
	if n := res.unanswered(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d events of requests whose client saw no status", n))
	}
	if n := res.counts.StreamRepublished; n > 0 {
		parts = append(parts, fmt.Sprintf("%d batch messages republished (same producer and seq; applied once)", n))
	}
	parts = append(parts, res.notes...)
	if res.reconcile != "" {
		parts = append(parts, "reconcile: "+res.reconcile)
	}
	return strings.Join(parts, "; ")
}

// writeTable writes the results as a markdown table.
func writeTable(w io.Writer, results []*result) error {
	var b strings.Builder
	b.WriteString("| Scenario | Sent | OK | Client errors | Events in stream | Rows in ClickHouse | Lost | Duplicated | Promised | Measured | Kept |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |\n")
	for _, res := range results {
		kept := "yes"
		if f := res.failures(); len(f) > 0 {
			kept = "**NO**: " + strings.Join(f, "; ")
		}
		// A scenario that ended in an error was not reconciled.
		lost, dups := "-", "-"
		if res.err == nil {
			lost, dups = strconv.FormatInt(res.lost(), 10), strconv.FormatInt(res.duplicated(), 10)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			res.name, res.out.Sent, res.out.OK, res.out.Errors, res.counts.StreamMsgs, res.counts.CHRows,
			lost, dups, cell(res.promise), cell(res.measured()), cell(kept))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes s safe inside a markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// selectScenarios returns the scenarios named in list (comma-separated;
// empty or "all" for every one), in run order.
func selectScenarios(list string) ([]scenario, error) {
	all := scenarios()
	if list == "" || list == "all" {
		return all, nil
	}
	names := strings.Split(list, ",")
	var out []scenario
	for _, s := range all {
		if i := slices.Index(names, s.name); i >= 0 {
			out = append(out, s)
			names = slices.Delete(names, i, i+1)
		}
	}
	if len(names) > 0 {
		var known []string
		for _, s := range all {
			known = append(known, s.name)
		}
		return nil, fmt.Errorf("unknown scenario %q (known: %s)", names[0], strings.Join(known, ", "))
	}
	return out, nil
}
