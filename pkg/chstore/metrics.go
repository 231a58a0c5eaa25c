package chstore

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// loaderMetrics are the Loader's Prometheus metrics, namespace
// tollgate_analytics.
type loaderMetrics struct {
	batches, rows, rewinds                   prometheus.Counter
	skippedStored, skippedDup, skippedPoison prometheus.Counter
	skippedRepublished                       prometheus.Counter
	republished, lostBatches, historyChanges prometheus.Counter
	errors                                   *prometheus.CounterVec
	insertSeconds                            prometheus.Histogram
	backoff, lag, watermark, leader          prometheus.Gauge
}

func newLoaderMetrics(reg prometheus.Registerer) (loaderMetrics, error) {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "tollgate", Subsystem: "analytics", Name: name, Help: help}
	}
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts(opts("skipped_events_total",
		"Delivered events not inserted, by reason: stored (at or below the watermark, or found already stored), duplicate (event id or delivery seen earlier in the batch), republished (their batch, same producer and seq, was applied before), poison (undecodable messages).")),
		[]string{"reason"})
	m := loaderMetrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts(opts("batches_total", "Batches stored and acknowledged."))),
		rows:    prometheus.NewCounter(prometheus.CounterOpts(opts("rows_total", "Events inserted into usage_events."))),
		rewinds: prometheus.NewCounter(prometheus.CounterOpts(opts("rewinds_total",
			"Times the consumer was recreated at the watermark because a delivery went missing."))),
		skippedStored:      skipped.WithLabelValues("stored"),
		skippedDup:         skipped.WithLabelValues("duplicate"),
		skippedPoison:      skipped.WithLabelValues("poison"),
		skippedRepublished: skipped.WithLabelValues("republished"),
		republished: prometheus.NewCounter(prometheus.CounterOpts(opts("republished_batches_total",
			"Batch messages skipped because their producer and seq were applied before: a republish after the stream's duplicate window, not a duplicate."))),
		lostBatches: prometheus.NewCounter(prometheus.CounterOpts(opts("lost_batches_total",
			"Batch seqs given up as lost: a producer's batch arrived usage.WindowSize or more seqs after one that never came."))),
		historyChanges: prometheus.NewCounter(prometheus.CounterOpts(opts("history_changes_total",
			"Times the stream held messages below the watermark that were never loaded (it lost its last messages, or was recreated), and the watermark was lowered to load them."))),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("errors_total",
			"Failed operations, by op: lease, start, fetch, rewind, store (insert or watermark), ack.")), []string{"op"}),
		insertSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tollgate", Subsystem: "analytics", Name: "insert_seconds",
			Help:    "Duration of successful batch inserts into ClickHouse.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		backoff: prometheus.NewGauge(prometheus.GaugeOpts(opts("backoff_seconds",
			"Current wait before the next retry; 0 when the last attempt succeeded."))),
		lag: prometheus.NewGauge(prometheus.GaugeOpts(opts("lag_events",
			"Stream last sequence minus the watermark: events in the stream not yet stored."))),
		watermark: prometheus.NewGauge(prometheus.GaugeOpts(opts("watermark_seq",
			"Highest stream sequence whose events are all stored."))),
		leader: prometheus.NewGauge(prometheus.GaugeOpts(opts("leader",
			"1 while this loader holds the durable's lease and loads, 0 while it stands by."))),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batches, m.rows, m.rewinds, skipped, m.republished, m.lostBatches, m.historyChanges, m.errors,
		m.insertSeconds, m.backoff, m.lag, m.watermark, m.leader} {
		if err := reg.Register(c); err != nil {
			return m, fmt.Errorf("register analytics metrics: %w", err)
		}
	}
	return m, nil
}
