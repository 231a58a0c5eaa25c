package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// PublisherStats is a snapshot of the usage-event publisher's counters
// (cumulative since start) and gauges.
type PublisherStats struct {
	// Queued, Published, Spooled, Drained, Failed and Dropped are event
	// counts: accepted by Enqueue, acked straight from memory, written to the
	// spool, acked from the spool, in a publish that failed, and lost.
	Queued, Published, Spooled, Drained, Failed, Dropped int64
	// QueueLen is the number of events waiting in memory.
	QueueLen int64
	// SpoolBytes is the size of the spool not yet drained, in bytes.
	SpoolBytes int64
	// BatchesPublished, BatchesSpooled, BatchesDrained, BatchesFailed and
	// BatchesDropped count the batches (stream messages) the events above
	// travelled in, alike.
	BatchesPublished, BatchesSpooled, BatchesDrained, BatchesFailed, BatchesDropped int64
	// LastSeq is the seq of the producer's last batch.
	LastSeq uint64
	// Recovered counts the events published at start for requests a
	// previous run began and never billed (in Queued too); Begun and
	// BegunDropped the begun records tracked and those refused (a full
	// queue).
	Recovered, Begun, BegunDropped int64
}

// publisherCollector reads a PublisherStats at scrape time.
type publisherCollector struct {
	stats                            func() PublisherStats
	events, queue, sp, batches, bseq *prometheus.Desc
	begun                            *prometheus.Desc
}

// RegisterPublisher registers on reg tollgate_usage_events_total{state},
// tollgate_usage_queue_length, tollgate_usage_spool_bytes,
// tollgate_usage_batches_total{state} and tollgate_usage_batch_seq, read
// from stats on every scrape. stats must be cheap and safe for concurrent
// use.
func RegisterPublisher(reg prometheus.Registerer, stats func() PublisherStats) error {
	c := &publisherCollector{
		stats: stats,
		events: prometheus.NewDesc("tollgate_usage_events_total",
			"Usage events by publisher state: queued (accepted), published (acked from memory), spooled (written to disk), drained (acked from the spool), failed (in a publish attempt that failed), dropped (lost).",
			[]string{"state"}, nil),
		queue: prometheus.NewDesc("tollgate_usage_queue_length",
			"Usage events waiting in the publisher's memory queue.", nil, nil),
		sp: prometheus.NewDesc("tollgate_usage_spool_bytes",
			"Bytes of usage events in the disk spool, not yet published.", nil, nil),
		batches: prometheus.NewDesc("tollgate_usage_batches_total",
			"Usage batches (one stream message each) by publisher state: published (acked from memory), spooled (written to disk), drained (acked from the spool), failed (publish attempts that failed), dropped (lost).",
			[]string{"state"}, nil),
		bseq: prometheus.NewDesc("tollgate_usage_batch_seq",
			"Seq of the last usage batch this gateway (producer) formed.", nil, nil),
		begun: prometheus.NewDesc("tollgate_usage_begun_total",
			"Begun records of requests whose upstream call began: tracked until their event, or dropped (the queue was full).",
			[]string{"state"}, nil),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register publisher metrics: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *publisherCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.queue
	ch <- c.sp
	ch <- c.batches
	ch <- c.bseq
	ch <- c.begun
}

// Collect implements prometheus.Collector.
func (c *publisherCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, e := range []struct {
		state string
		n     int64
	}{
		{"queued", s.Queued}, {"published", s.Published}, {"spooled", s.Spooled},
		{"drained", s.Drained}, {"failed", s.Failed}, {"dropped", s.Dropped}, {"recovered", s.Recovered},
	} {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(e.n), e.state)
	}
	ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(s.QueueLen))
	ch <- prometheus.MustNewConstMetric(c.sp, prometheus.GaugeValue, float64(s.SpoolBytes))
	for _, e := range []struct {
		state string
		n     int64
	}{
		{"published", s.BatchesPublished}, {"spooled", s.BatchesSpooled}, {"drained", s.BatchesDrained},
		{"failed", s.BatchesFailed}, {"dropped", s.BatchesDropped},
	} {
		ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(e.n), e.state)
	}
	ch <- prometheus.MustNewConstMetric(c.bseq, prometheus.GaugeValue, float64(s.LastSeq))
	ch <- prometheus.MustNewConstMetric(c.begun, prometheus.CounterValue, float64(s.Begun), "tracked")
	ch <- prometheus.MustNewConstMetric(c.begun, prometheus.CounterValue, float64(s.BegunDropped), "dropped")
}

// BudgetStats is a snapshot of budget state for the budget gauges. Each
// label set must appear at most once.
type BudgetStats struct {
	Utilization []BudgetUtilization
	Reserved    []BudgetReserved
	// AwaitingAck is the number of reservations whose usage event has not
	// been acknowledged by the stream yet; UnackedReleased counts those
	// released after budget.TrackerOptions.AckWait without an ack (their
	// event went to the spool).
	AwaitingAck     int
	UnackedReleased uint64
}

// BudgetUtilization is the spend of one limit's total as a fraction of the
// limit (1 = fully spent; it may exceed 1).
type BudgetUtilization struct {
	// Scope is global, dept, team, project, subject or key; Value the scope
	// value; Period day, month or total.
	Scope, Value, Period string
	Ratio                float64
}

// BudgetReserved is the spend this gateway has reserved for requests in
// flight or not yet applied to the totals, for one scope value ("*" or ""
// when it sums a whole scope), in nano-USD.
type BudgetReserved struct {
	Scope, Value string
	Nano         int64
}

// budgetCollector reads a BudgetStats at scrape time.
type budgetCollector struct {
	stats                func() BudgetStats
	util, reser          *prometheus.Desc
	awaiting, unackedRel *prometheus.Desc
}

// RegisterBudgets registers on reg tollgate_budget_utilization_ratio{scope,
// value,period}, tollgate_budget_reserved_nano_usd{scope,value},
// tollgate_budget_reservations_awaiting_ack and
// tollgate_budget_reservations_unacked_released_total, read from stats on
// every scrape. stats must be safe for concurrent use.
func RegisterBudgets(reg prometheus.Registerer, stats func() BudgetStats) error {
	c := &budgetCollector{
		stats: stats,
		util: prometheus.NewDesc("tollgate_budget_utilization_ratio",
			"Spend of a budget limit's current period as a fraction of the limit.",
			[]string{"scope", "value", "period"}, nil),
		reser: prometheus.NewDesc("tollgate_budget_reserved_nano_usd",
			"Spend this gateway has reserved and not yet seen applied to the totals, in nano-USD.",
			[]string{"scope", "value"}, nil),
		awaiting: prometheus.NewDesc("tollgate_budget_reservations_awaiting_ack",
			"Budget reservations whose usage event the stream has not acknowledged yet.", nil, nil),
		unackedRel: prometheus.NewDesc("tollgate_budget_reservations_unacked_released_total",
			"Budget reservations released because their usage event got no stream ack in time (it went to the spool).", nil, nil),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register budget metrics: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.util
	ch <- c.reser
	ch <- c.awaiting
	ch <- c.unackedRel
}

// Collect implements prometheus.Collector.
func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, u := range s.Utilization {
		ch <- constMetric(c.util, u.Ratio, u.Scope, u.Value, u.Period)
	}
	for _, r := range s.Reserved {
		ch <- constMetric(c.reser, float64(r.Nano), r.Scope, r.Value)
	}
	ch <- prometheus.MustNewConstMetric(c.awaiting, prometheus.GaugeValue, float64(s.AwaitingAck))
	ch <- prometheus.MustNewConstMetric(c.unackedRel, prometheus.CounterValue, float64(s.UnackedReleased))
}

// constMetric returns a gauge, or for label values Prometheus refuses
// (invalid UTF-8) a metric that fails the scrape of this series only.
func constMetric(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// IssuerKeys is one token issuer's key state for the auth gauges.
type IssuerKeys struct {
	Issuer               string
	Keys                 int
	Fetches, FetchErrors int64 // key fetches (discovery_url, jwks_url) since start
}

// authCollector reads the issuers' key state at scrape time.
type authCollector struct {
	stats                  func() []IssuerKeys
	keys, fetches, fetchEr *prometheus.Desc
}

// RegisterAuth registers on reg tollgate_auth_issuer_keys{issuer},
// tollgate_auth_key_fetches_total{issuer} and
// tollgate_auth_key_fetch_errors_total{issuer}, read from stats on every
// scrape: an issuer at 0 keys refuses its tokens, and failing fetches mean
// its identity provider is unreachable (the last good keys stay).
func RegisterAuth(reg prometheus.Registerer, stats func() []IssuerKeys) error {
	c := &authCollector{
		stats: stats,
		keys: prometheus.NewDesc("tollgate_auth_issuer_keys",
			"Keys a token issuer verifies with now; 0 refuses its tokens.", []string{"issuer"}, nil),
		fetches: prometheus.NewDesc("tollgate_auth_key_fetches_total",
			"Fetches of an issuer's keys from its discovery_url or jwks_url.", []string{"issuer"}, nil),
		fetchEr: prometheus.NewDesc("tollgate_auth_key_fetch_errors_total",
			"Failed fetches of an issuer's keys (the last good keys stay in use).", []string{"issuer"}, nil),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register auth metrics: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *authCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.fetches
	ch <- c.fetchEr
}

// Collect implements prometheus.Collector.
func (c *authCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		ch <- constMetric(c.keys, float64(s.Keys), s.Issuer)
		ch <- prometheus.MustNewConstMetric(c.fetches, prometheus.CounterValue, float64(s.Fetches), s.Issuer)
		ch <- prometheus.MustNewConstMetric(c.fetchEr, prometheus.CounterValue, float64(s.FetchErrors), s.Issuer)
	}
}
