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
// departments are two totals. A fetched batch is aggregated in memory and
// every touched total is written once, with optimistic concurrency (the
// write expects the revision last read; on conflict the total is re-read
// and the batch re-applied to it). The batch is acknowledged only after all
// its writes succeeded; a batch that cannot be written is redelivered
// (NakWithDelay). Undecodable events are logged and terminated.
//
// # Exactly once
//
// Each total stores as_of_seq, the largest stream sequence it includes, and
// an event is added to a total only if its sequence is larger. That is
// exact only when whoever writes a total has applied, in stream order,
// every earlier event that belongs to it. So each Consumer keeps a point
// below which every event is in all its totals (at start, the durable's ack
// floor), and when a fetched batch is not the exact continuation of that
// point (messages went to another instance, or await redelivery after a
// crash or a Nak), it reads the missing range straight from the stream and
// applies it first. Hence redelivery, restarts, replays with a fresh
// durable and several instances sharing the durable never count an event
// twice or lose one. Instances sharing the durable add availability, not
// throughput: each applies (or skips, by as_of_seq) every event.
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
// and posts it to a webhook when one is configured.
package budget
