//go:build chscale

package dashboards

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest/scaledata"
)

// The scale benchmark (make bench-dashboards): not part of make test.
var (
	scaleEvents = flag.Int("scale.events", 1_000_000, "synthetic usage events to load")
	scaleRuns   = flag.Int("scale.runs", 3, "timed runs of each panel (the median is reported)")
	scaleOut    = flag.String("scale.out", "", "also write the timings table (markdown) to this file")
)

// TestScale loads -scale.events synthetic events through the usage stream
// and the analytics loader into ClickHouse 18.16 (a server of its own),
// then times every panel of every dashboard over the 30 days with every
// variable at All, as Grafana sends them. It asserts nothing about time:
// it reports.
func TestScale(t *testing.T) {
	end := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	from := end.Add(-scaledata.Days * 24 * time.Hour)
	store, summary := scaledata.Load(t, *scaleEvents, from)
	ctx := context.Background()
	if _, err := store.WriteLimits(ctx, []chstore.Limit{
		{Scope: "dept", Value: "*", Period: "month", AmountNano: 50_000e9},
		{Scope: "dept", Value: "dept-7", Period: "month", AmountNano: 100e9},
		{Scope: "team", Value: "*", Period: "day", AmountNano: 500e9},
		{Scope: "key", Value: "*", Period: "total", AmountNano: 1000e9},
		{Scope: "subject", Value: "*", Period: "month", AmountNano: 200e9},
		{Scope: "global", Period: "month", AmountNano: 10_000_000e9},
	}, end); err != nil {
		t.Fatal(err)
	}
	out := summary + "\n" + timePanels(t, store, from, end)
	t.Log("\n" + out)
	if *scaleOut != "" {
		if err := os.WriteFile(*scaleOut, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// timePanels runs every panel of every dashboard over [from, to] with
// every variable at All, -scale.runs times, and returns a markdown table of
// the first and the median time.
func timePanels(t *testing.T, store *chstore.Store, from, to time.Time) string {
	t.Helper()
	ctx := context.Background()
	var out strings.Builder
	fmt.Fprintf(&out, "| dashboard | panel | rows returned | first run | median of %d |\n|---|---|---:|---:|---:|\n", *scaleRuns)
	dashes := loadDashboards(t)
	for _, f := range slices.Sorted(maps.Keys(dashes)) {
		d := dashes[f]
		e := &expander{from: from, to: to, interval: 3600, vars: map[string][]string{}}
		resolveVars(ctx, t, store.Conn(), d, e, nil)
		for _, p := range flatPanels(d.Panels) {
			for _, tg := range p.Targets {
				sql, err := e.expand(tg.RawSQL)
				if err != nil {
					t.Fatal(err)
				}
				var times []time.Duration
				var got int
				for range max(*scaleRuns, 1) {
					start := time.Now()
					rs, err := query(ctx, store.Conn(), sql)
					if err != nil {
						t.Fatalf("%s: %v", p.Title, err)
					}
					times = append(times, time.Since(start))
					got = len(rs)
				}
				first := times[0]
				slices.Sort(times)
				fmt.Fprintf(&out, "| %s | %s | %d | %v | %v |\n", strings.TrimSuffix(f, ".json"), p.Title, got,
					first.Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond))
			}
		}
	}
	return out.String()
}
