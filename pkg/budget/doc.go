// Package budget turns usage events into spend totals and enforces spend
// limits.
//
// # Totals
//
// The Consumer is a durable pull consumer ("budget") on the usage stream. It
// adds each event's cost, tokens and request count to every total the event
// belongs to: its key, subject, team, dept and project (empty values are
// skipped) and global, each for the UTC day and month of the event's
// timestamp and for all time. Team and project values are qualified by the
// event's department (Qualify: "research/ml"), so equal team names in two
// departments are two totals. The messages of one fetch (a fold) are
// aggregated in memory and every touched total is written once (and a fold
// begins at least FoldInterval after the previous one, so a total is
// written at most once per interval whatever the event rate), with
// optimistic concurrency (the write expects the revision last read; on
// conflict the total is re-read and the fold re-applied to it). The
// messages are acknowledged only after all the fold's writes succeeded;
// a fold that cannot be written is redelivered (NakWithDelay). Undecodable
// messages are logged and terminated.
//
// # Exactly once
//
// The stream holds two kinds of message: a producer's batch of events
// (usage.UsageBatch: producer id, batch seq; compressed or not, both read
// by usage.DecodeMessageAliased) and, from before batches, a legacy single
// event. A batch counts once per (producer, seq), at its
// first appearance in stream order, with no time window: a copy the
// stream stored again (published after the stream's duplicate window,
// e.g. by a spool drain after a long outage) is skipped and counted in
// tollgate_budget_duplicate_batches_total. A legacy event counts once per
// stream message, as before batches existed.
//
// Two mechanisms make that hold under redelivery, crashes, restarts and
// several instances. First, each total stores as_of_seq, the largest
// stream sequence it includes, and a message's events are added to a total
// only if its sequence is larger. That is exact only when whoever writes a
// total has applied, in stream order, every earlier message that belongs to
// it. So each Consumer keeps a point below which every message is in all
// its totals (at start, the durable's ack floor), and when a fetched batch
// is not the exact continuation of that point (messages went to another
// instance, or await redelivery after a crash or a Nak), it reads the
// missing range straight from the stream and applies it first.
//
// Second, which batches count is decided by a usage.Applier, one Window
// per producer (constant size: WindowSize seqs), fed every message in
// that same stream order, so its verdict on a message is a function of the
// stream alone, whichever instance computes it. Its state is persisted in
// DedupBucket, one checkpoint per producer: the producer's Window and the
// stream sequence it covers. A fold writes the totals, then the checkpoint
// of every producer whose Window it changed (never replacing one that
// covers more; first that of the producer whose batch is the fold's last
// message, which the history check judges by), then acknowledges its
// messages. On start, and after a
// failed fold, the Consumer reloads the checkpoints (after reading the ack
// floor): a message at or below its producer's checkpoint is accounted
// for already and skipped, a later one is judged by the Window. Crash
// points: after the totals and before the checkpoints, the messages are
// redelivered, judged fresh again by the old checkpoint, and skipped by
// the totals' as_of_seq; after the checkpoints and before the acks, they
// are redelivered and skipped as covered. Hence redelivery, restarts,
// replays with a fresh durable and several instances sharing the durable
// never count an event twice or lose one. Instances sharing the durable
// add availability, not throughput: each applies (or skips) every message.
//
// Gaps: a producer's batches arrive at most WindowSize out of order (its
// publisher never runs further ahead of its oldest unacknowledged batch).
// tollgate_budget_producer_missing_batches sums, over producers, the
// batches below a producer's newest applied one that have not arrived (a
// spool still draining, or lost); a batch the Window has to move past is
// given up, counted in tollgate_budget_lost_batches_total and logged, and
// never applied if it arrives later. Undecodable messages are terminated
// and counted in tollgate_budget_poison_events_total.
//
// History: the totals' as_of_seq and c.safe are stream sequences, so
// messages that took the sequences of messages the stream lost after
// acknowledging them (or of a recreated stream) would be skipped. Before
// its first fold, after a failed fetch and after a reconnect, a Consumer
// checks the message at the highest sequence folded (checkHistory) and
// publishes the batches the checkpoints never applied again, so that their
// copies are folded (tollgate_budget_history_checks_total,
// tollgate_budget_history_changes_total,
// tollgate_budget_history_republished_batches_total).
//
// # Enforcement
//
// The Tracker, run inside the gateway, keeps every total in memory from a
// watch of the bucket, plus the gateway's reservations for requests whose
// events are not in the totals yet. See Tracker for the invariant this
// gives. It owns a reservation's whole life (await.go): Reserve at
// admission, Settle at the end, Await while the usage event is on its way,
// OnAck (the publisher's hook) with the event's stream sequence, and
// release as the totals cover it, or after AckWait without an ack (the
// event went to the spool); the releases run in the watch loop.
//
// # Alerts
//
// When a write makes a total reach a configured fraction of a configured
// limit (default 0.5, 0.8 and 1.0), the Consumer records the crossing in
// AlertBucket and publishes an Alert to tollgate.budget.alerts.<scope>,
// and posts it to a webhook when one is configured (JSON, or a Slack
// message). With ForecastAlerts, a day or month limit whose projected
// spend at the period's end (Project) crosses it is announced the same
// way, once per period; with AnomalyFactor, so is a limited scope value's
// hour whose spend is over the factor times its trailing rate (SpikeOf).
// The forecast is a pure function of the day totals (forecast.go).
package budget
