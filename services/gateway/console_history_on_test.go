//go:build clickhouse

package main

// consoleHistory: with -tags clickhouse (make test's second run of this
// package), TestConsoleInBrowser builds the gateway with ClickHouse and
// runs the analytics service into a ClickHouse of its own, so that the
// console's history pages (requests, the overview's chart) show rows.
const consoleHistory = true
