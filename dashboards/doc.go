// Package dashboards holds Tollgate's Grafana dashboards as JSON, for the
// official ClickHouse data source plugin (grafana-clickhouse-datasource v4),
// and the test that runs every panel's SQL against a real ClickHouse.
//
//   - spend-by-department.json, "Spend by department": spend over time per
//     dept, month-to-date spend against budget, top teams, projects,
//     subjects and models by cost, tokens in/out, cost per 1k requests;
//     variables dept, team, model (multi-value, All) and the constant
//     dept_budgets.
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
// Budget limits live in the gateway config, not in ClickHouse. The panel
// "Month-to-date spend against budget" reads them from the dashboard
// constant dept_budgets: comma-separated dept=USD pairs such as
// "eng=5000,sales=2000,*=1000", where "*" is the limit of every dept not
// named (as in a config limit with value "*"). Set it to the config's
// budgets with scope dept and period month. Month-to-date means the UTC
// calendar month of the end of the dashboard's time range, up to that end.
//
// # SQL
//
// The SQL runs on ClickHouse 18.16 and current releases, so it avoids
// WITH-CTEs, window functions and toStartOfInterval; the plugin's
// $__timeInterval(col) expands to toStartOfInterval, so panels bucket time
// with intDiv(toUInt32(col), $__interval_s) instead. Spend and token panels
// read the hourly rollup usage_hourly (time buckets are never finer than an
// hour); panels that need subjects or latency distributions read
// usage_events. Multi-value variables are used as IN (${var:singlequote}).
// Months are matched with toYYYYMM(col) = toYYYYMM($__toTime, 'UTC'):
// 18.16 compares a DateTime('UTC') column with a Date wrongly.
package dashboards
