//go:build !clickhouse

package main

// consoleHistory: without -tags clickhouse the gateway reads no
// ClickHouse, and TestConsoleInBrowser checks the history pages' designed
// error state instead of their rows.
const consoleHistory = false
