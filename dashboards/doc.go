// Package dashboards holds Tollgate's Grafana dashboards as JSON, for the
// official ClickHouse data source plugin, grafana-clickhouse-datasource
// 4.13.0 (the version docker-compose.yml installs), and the tests that run
// every panel's SQL against a real ClickHouse: 18.16 for the expected
// numbers, and 18.16 against 26.x (versions_test.go, build tag chdb, with
// every statement of pkg/chsql) for the same answers on both. Each query
// is saved in the plugin's version 4 form (editorType sql, queryType table
// or timeSeries with format 1 or 0, pluginVersion 4.13.0), so Grafana does
// not migrate it as a version 3 query on load. scale_test.go (build tag
// chscale, make bench-dashboards) times every panel on millions of
// synthetic events loaded through the analytics loader.
//
//   - spend-by-department.json, "Spend by department": spend over time per
//     dept, month-to-date spend against budget, top teams, projects,
//     subjects, keys and models by cost, tokens in/out, cost per 1k
//     requests, the budget limits in force, every limit's spend and
//     forecast; variables dept, team, model (multi-value, All).
//   - gateway-traffic.json, "Gateway traffic": requests by provider, errors
//     by type, fallbacks and retries, time to first token and gateway
//     overhead p50/p99 per provider, and the recent operator changes
//     (audit_events: revocations, reloads, budget limits, keys); variables
//     provider and model.
//
// Both refer to the data source uid tollgate-clickhouse, provisioned by
// deploy/grafana/provisioning, whose default database holds the chstore
// schema, so table names are unqualified.
//
// # Budgets
//
// The panel "Month-to-date spend against budget" compares each dept's
// spend with the limits the gateways enforce: the config's budgets (scope
// dept, period month; a dept without a limit of its own has the "*" one),
// which the analytics service (or gateway -embed, built with -tags
// clickhouse) writes to the table budget_limits at start and on every
// reload. Panels read the view budget_limits_current
// (the newest write of each limit, removed ones left out), never the
// table; "Budget limits in force" lists it. Month-to-date means the UTC
// calendar month of the end of the dashboard's time range, up to that end.
// Limits signed into tokens are per token and not in ClickHouse.
//
// The panel "Budget spend and forecast" gives every limit of
// budget_limits_current, of every scope and period, with each value it
// applies to (a "*" or "*/name" limit: every matching value with spend in
// the period, or for a day or month limit in the rate window), its spend so
// far in the period (all time for a total limit), rate and, for day and
// month limits, projected spend at the period's end, as of the end of the
// time range, by the method of pkg/budget's Project (the budget service's
// forecast alerts and tollctl budget show): rate = spend since 00:00 UTC
// six days before that day (or the first day with spend, when later) over
// the time elapsed, at least an hour; projected = spend + rate x time left.
// A scope with a total limit is read from its first event, the others from
// the earlier of the month's and the rate window's start. The arithmetic is
// integer nano-USD in SQL, days as intDiv(toUInt32(ts), 86400) so that no
// time zone is involved (exact, where Project saturates, while a value's
// rate-window spend stays under about 12 million USD); only the results are
// divided into USD. The test compares every row with Project on the seeded
// day totals, and the mid-month case with figures worked out by hand.
//
// # SQL
//
// The SQL runs on ClickHouse 18.16 and current releases, so it avoids
// WITH-CTEs, window functions and toStartOfInterval, and gives every
// subquery of a join an alias ((...) AS l ANY LEFT JOIN (...) AS r USING
// (k): current releases refuse a join of unaliased subqueries); the plugin's
// $__timeInterval(col) expands to toStartOfInterval, so panels bucket time
// with intDiv(toUInt32(col), $__interval_s) instead. Spend and token time
// series and month-to-date spend read hourly rollups (time buckets are
// never finer than an hour). The top-N tables, cost per 1k requests and the
// budget forecast read daily rollups (usage_team_daily, usage_daily,
// usage_key_daily, usage_subject_daily, usage_scope_daily), so they count
// whole UTC days: $__dateFilter(day) takes every day the range touches, and
// the forecast counts all of its last day (the range ends now). The traffic
// counts (requests, errors, fallbacks and retries) read usage_traffic_5m, in
// buckets of at least 5 minutes that $__timeFilter(bucket) takes whole; the
// latency quantiles read the hourly histograms usage_overhead_hourly and
// usage_ttft_hourly (whole hours), whose buckets keep two significant digits
// of the microseconds: a quantile shown is its bucket's lower bound, at most
// 10% under the exact value (quantileExactWeighted: the smallest bucket whose
// cumulated count reaches ceil(level*n)).
//
// Grafana sends All as the list of every value. A panel that has a narrower
// rollup for the case where the team or model list holds every value of the
// selected departments (usage_dims says which exist) reads it then, and the
// wider one otherwise: two branches of a UNION ALL, one of which has a WHERE
// that is constant false (a scalar subquery on usage_dims), so ClickHouse
// reads nothing for it. Spend over time and tokens read usage_dept_hourly
// when every team and model is selected, usage_hourly otherwise; top
// subjects and keys read usage_subject_daily when every model is selected,
// usage_key_daily otherwise. The choice needs no custom all value. Spend
// over time shows the ten departments that spent most in the range: a
// series per department and hour for hundreds of departments is more
// rows than a graph shows (docs/performance.md).
//
// The loader stores each event once, so no panel uses FINAL (the test
// refuses it), and TestVersions checks every panel over a rollup against
// the same query over usage_events. Multi-value variables are used as
// IN (${var:singlequote}). Months are matched with toYYYYMM(col) = toYYYYMM($__toTime, 'UTC'):
// 18.16 compares a DateTime('UTC') column with a Date wrongly.
package dashboards
