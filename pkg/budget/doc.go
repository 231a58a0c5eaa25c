// Package budget turns usage events into spend totals and enforces spend
// limits.
//
// The Consumer (the budget service) folds the usage stream into spend
// totals in the KV bucket Bucket, one per scope value and period, exactly
// once per producer batch with no time window, and raises threshold,
// forecast and anomaly alerts. The Tracker (in each gateway) watches the
// totals in memory, reserves each request's estimate at admission and
// releases it once the totals include the request's event; with leases, a
// limit holds across any number of gateways (lease.go).
//
// The design, the exactly-once argument, the crash points and the lease
// proof are in docs/design/budgets.md.
package budget
