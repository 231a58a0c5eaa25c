// Package finance answers finance questions from the usage events in
// ClickHouse (the chstore schema): how one charge came about (Explain, a
// billing.Charge; Store answers billing.Explainer from ClickHouse), what
// proposed budgets would have refused (Simulate), and signed, hash-chained
// month-end statements per department (BuildStatement, Sign, Verify). It
// backs tollctl explain, simulate and statement.
//
// Every query reads usage_events with FINAL, so copies of one event count
// once. Money is int64 nano-USD throughout.
package finance
