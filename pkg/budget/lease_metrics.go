package budget

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// leaseCollector reads the Tracker's LeaseStats at scrape time.
type leaseCollector struct {
	t                                           *Tracker
	held, refills, conflicts, errs, waits, room *prometheus.Desc
	waitSecs                                    *prometheus.Desc
}

// RegisterLeaseMetrics registers on reg the lease metrics of t (docs/budgets.md:
// metrics): tollgate_budget_leases_held, tollgate_budget_lease_refills_total,
// tollgate_budget_lease_conflicts_total, tollgate_budget_lease_errors_total,
// tollgate_budget_lease_waits_total, tollgate_budget_lease_wait_seconds (a
// histogram) and tollgate_budget_lease_refused_with_headroom_total. It
// registers nothing when t has no leases.
func RegisterLeaseMetrics(reg prometheus.Registerer, t *Tracker) error {
	if t.leases == nil {
		return nil
	}
	c := &leaseCollector{t: t,
		held: prometheus.NewDesc("tollgate_budget_leases_held",
			"Limited totals this gateway holds a budget lease slice with room of.", nil, nil),
		refills: prometheus.NewDesc("tollgate_budget_lease_refills_total",
			"Budget lease writes (draws, renewals, give-backs) that succeeded.", nil, nil),
		conflicts: prometheus.NewDesc("tollgate_budget_lease_conflicts_total",
			"Budget lease compare-and-set attempts lost to another gateway's write, then retried.", nil, nil),
		errs: prometheus.NewDesc("tollgate_budget_lease_errors_total",
			"Budget lease writes that failed (NATS unreachable, timeouts).", nil, nil),
		waits: prometheus.NewDesc("tollgate_budget_lease_waits_total",
			"Requests that waited for their gateway's budget lease to be refilled.", nil, nil),
		room: prometheus.NewDesc("tollgate_budget_lease_refused_with_headroom_total",
			"Requests refused because their gateway's slice had no room although the limit had (applied spend plus this gateway's reservations under it).", nil, nil),
		waitSecs: prometheus.NewDesc("tollgate_budget_lease_wait_seconds",
			"How long requests waited for a budget lease refill.", nil, nil),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register budget lease metrics: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.held, c.refills, c.conflicts, c.errs, c.waits, c.room, c.waitSecs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.t.LeaseStats()
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.Held))
	ch <- prometheus.MustNewConstMetric(c.refills, prometheus.CounterValue, float64(st.Refills))
	ch <- prometheus.MustNewConstMetric(c.conflicts, prometheus.CounterValue, float64(st.Conflicts))
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(st.Waits))
	ch <- prometheus.MustNewConstMetric(c.room, prometheus.CounterValue, float64(st.RefusedWithRoom))
	buckets := make(map[float64]uint64, len(waitBounds))
	for i, b := range waitBounds {
		buckets[b] = st.WaitBuckets[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.waitSecs, st.Waits, st.WaitSum, buckets)
}
