// Package reconcile proves that no request was lost or counted twice on its
// way through Tollgate's accounting: it counts the requests and sums the
// cost (nano-USD, exactly) of one time range in every source it is given
// and reports each disagreement. It is the engine of `tollctl reconcile`.
//
// # Sources
//
//   - stream: the usage events in the JetStream stream TOLLGATE_USAGE, the
//     reference, read through replay, so each producer's batch counts once
//     (usage.Applier, as the budget consumer decides); requests and cost
//     also count each event id once. raw_requests counts the events of
//     every stored message, and duplicates is the difference: a batch, or
//     a legacy single-event message, republished after the stream's
//     deduplication window (a spool drain, an operator's replay of an
//     NDJSON file). duplicate_batches, lost_batches and missing_batches
//     count republished batches, batches given up, and batches not yet
//     arrived. The stream side also
//     reports served_requests and served_cost_nano_usd, its events billed
//     from the upstream's own usage (see mock below).
//   - clickhouse: the rows of usage_events, deduplicated by event id (as
//     FINAL or the finance queries see them); raw_rows counts rows before
//     deduplication.
//   - budgets: the spend totals in the KV bucket tollgate_spend. Totals are
//     cumulative per scope and period, so they are compared only over whole
//     periods: without a range, the all-time totals (period total); with a
//     range whose ends are UTC midnights (or open), the sum of the day
//     totals of its days. The global scope's totals must equal the stream's
//     events, and the sum of the dept scope's totals the stream's events
//     that carry a dept (dept_requests, dept_cost_nano_usd on both sides).
//     The budget consumer counts a republished batch once, but each legacy
//     single-event message, so a republished legacy event shows here as a
//     difference (the spend is counted twice; legacy_duplicates).
//   - mock: the ledger of pkg/mockllm (GET /ledger), in tests and chaos
//     runs. An answer is served when the mock completed it and reported its
//     usage; each ledger group is priced with the price table given (the
//     config's prices over the embedded table, looked up by the model the
//     mock was asked for, as the gateway prices the upstream model).
//     Served answers are compared with the stream's events billed from
//     upstream usage: status 200, not estimated, not a client abort, not a
//     cache hit, at least one upstream attempt. A failed attempt the gateway
//     retried or fell back from is no served answer at the mock and adds
//     nothing to the event; streams cut by the client, by the upstream or by
//     an error event are billed from the gateway's estimate and are on
//     neither side; so are the recovered events of requests a killed
//     gateway began (estimated), which the stream source counts in
//     recovered_requests and recovered_cost_nano_usd. An answer the mock completed after the gateway gave up
//     on it (an upstream timeout shorter than the mock's latency, or a
//     client that disconnects in the last moment of a stream, after the mock
//     wrote its end but before the gateway relayed it) is served at the mock
//     and not billed from usage by the gateway: a reported difference, and a
//     real one, since a provider bills what it produced. The mock's ledger has no time: it
//     is compared only when the range covers whole periods, and the caller
//     makes the range cover the mock's life (reset the ledger, or give no
//     range).
//
// # Range
//
// A range [Since, Until) selects events by their own timestamp (the
// request's arrival at the gateway), in milliseconds, in every source. The
// stream is read from Since minus Options.Skew by stored time (events are
// stored after they happen, by up to the publish and spool delay, and the
// gateway's clock may run ahead of the server's by up to Skew) to its last
// message. A range that is not made of whole UTC days compares the stream
// with ClickHouse only, and the report says so (Range.Budgets).
//
// # Waiting
//
// The budget and analytics consumers lag the stream, and the stream lags
// the gateways. With Options.Wait, Run reads every source again until they
// all agree or the time is up, and returns the last report.
package reconcile
