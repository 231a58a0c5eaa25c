package finance

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/parquet-go/parquet-go"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// focusEvents spread awkward costs (1 nano-USD, just under a dollar, large
// sums) over days, departments, keys and models, with events on both sides
// of the month's boundaries.
func focusEvents() []ev {
	return []ev{
		{req: "before", dept: "eng", team: "ml", project: "p1", subject: "alice", model: "gpt-5", ts: time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), in: 5, out: 5, cost: 1_000_000_000},
		{req: "first", dept: "eng", team: "ml", project: "p1", subject: "alice", model: "gpt-5", ts: day(1, 0), in: 100, out: 20, cached: 10, written: 40, cost: 1},
		{req: "r2", dept: "eng", team: "ml", project: "p1", subject: "alice", model: "gpt-5", ts: day(1, 5), in: 200, out: 30, written: 2, cost: 999_999_999},
		{req: "r3", dept: "eng", team: "ml", project: "p1", subject: "bob", model: "gpt-5", ts: day(1, 6), in: 7, out: 3, cost: 333_333_333},
		{req: "r4", dept: "eng", team: "web", project: "p2", subject: "bob", model: "claude-sonnet-4-5", ts: day(2, 23), in: 1_000_000, out: 2_000, cost: 123_456_789_012},
		{req: "r5", dept: "sales", team: "emea", project: "crm", subject: "carol", model: "gpt-5", ts: day(2, 1), in: 9, out: 1, cost: 7},
		{req: "r6", dept: "sales", team: "emea", project: "crm", subject: "carol", model: "gpt-5", ts: day(2, 2), in: 11, out: 2, cost: 100_000_000_001},
		{req: "last", dept: "sales", team: "emea", project: "crm", subject: "carol", model: "gpt-4o-mini", ts: time.Date(2024, 3, 31, 23, 59, 59, 0, time.UTC), in: 1, out: 1, cost: 3},
		{req: "after", dept: "sales", team: "emea", project: "crm", subject: "carol", model: "gpt-4o-mini", ts: time.Date(2024, 4, 1, 0, 0, 0, 0, time.UTC), in: 1, out: 1, cost: 5},
	}
}

// ledger is what usage_events says of a month: cost and tokens.
type ledger struct {
	cost             int64
	prompt, complete uint64
	requests         uint64
}

func ledgerOf(t *testing.T, conn driver.Conn, dept string) ledger {
	t.Helper()
	var l ledger
	q := `SELECT sum(cost_nano_usd), sum(prompt_tokens), sum(completion_tokens), toUInt64(count())
		FROM usage_events FINAL WHERE toYYYYMM(ts) = 202403`
	var args []any
	if dept != "" {
		q += ` AND dept = ?`
		args = append(args, dept)
	}
	if err := conn.QueryRow(context.Background(), q, args...).Scan(&l.cost, &l.prompt, &l.complete, &l.requests); err != nil {
		t.Fatal(err)
	}
	return l
}

// csvLedger sums the CSV export's BilledCost (parsed exactly, as decimals)
// and token columns.
func csvLedger(t *testing.T, data []byte) (ledger, []map[string]string) {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var l ledger
	var rows []map[string]string
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, name := range recs[0] {
			row[name] = rec[i]
		}
		rows = append(rows, row)
		for _, col := range []string{"BilledCost", "EffectiveCost", "ListCost", "ContractedCost"} {
			if row[col] != row["BilledCost"] {
				t.Errorf("%s %s != BilledCost %s", col, row[col], row["BilledCost"])
			}
		}
		n, err := pricing.ParseUSD(row["BilledCost"])
		if err != nil {
			t.Fatal(err)
		}
		l.cost += n
		l.prompt += parseUint(t, row["x_PromptTokens"])
		l.complete += parseUint(t, row["x_CompletionTokens"])
		l.requests += parseUint(t, row["x_Requests"])
		if q := parseUint(t, row["PricingQuantity"]); q != parseUint(t, row["x_PromptTokens"])+parseUint(t, row["x_CompletionTokens"]) || row["PricingUnit"] != "Tokens" {
			t.Errorf("PricingQuantity %d %s, want the prompt and completion tokens", q, row["PricingUnit"])
		}
	}
	return l, rows
}

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFocusExportReconciles: the export of a month, as CSV and as Parquet,
// adds up to the ledger (usage_events, each event stored twice) exactly,
// for all departments and for one.
func TestFocusExportReconciles(t *testing.T) {
	conn := open(t, focusEvents())
	ctx := context.Background()
	for _, dept := range []string{"", "eng", "sales", "nobody"} {
		t.Run("dept="+dept, func(t *testing.T) {
			rows, err := FocusExport(ctx, conn, FocusOptions{Month: "2024-03", Dept: dept})
			if err != nil {
				t.Fatal(err)
			}
			want := ledgerOf(t, conn, dept)
			var buf bytes.Buffer
			if err := WriteFocusCSV(&buf, rows); err != nil {
				t.Fatal(err)
			}
			got, csvRows := csvLedger(t, buf.Bytes())
			if got != want {
				t.Errorf("csv sums %+v, ledger %+v", got, want)
			}
			for _, r := range csvRows {
				if dept != "" && r["SubAccountId"] != dept {
					t.Errorf("row of dept %s in the %s export", r["SubAccountId"], dept)
				}
			}

			buf.Reset()
			if err := WriteFocusParquet(&buf, rows); err != nil {
				t.Fatal(err)
			}
			back, err := parquet.Read[FocusRow](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err != nil {
				t.Fatal(err)
			}
			var pq ledger
			for _, r := range back {
				pq.cost += r.BilledCost
				pq.prompt += r.XPromptTokens
				pq.complete += r.XCompletionTokens
				pq.requests += r.XRequests
			}
			if pq != want {
				t.Errorf("parquet sums %+v, ledger %+v", pq, want)
			}
			if len(back) != len(rows) {
				t.Errorf("parquet has %d rows, want %d", len(back), len(rows))
			}
		})
	}
}

// TestFocusRows checks the columns of the rows a finance tool reads.
func TestFocusRows(t *testing.T) {
	conn := open(t, focusEvents())
	rows, err := FocusExport(context.Background(), conn, FocusOptions{Month: "2024-03", Dept: "eng", Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	// Day 1: alice's two events in one row, bob's in another; day 2: bob on claude.
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	r := rows[0]
	tests := []struct{ name, got, want string }{
		{"BillingAccountId", r.BillingAccountId, "acme"},
		{"BillingCurrency", r.BillingCurrency, "USD"},
		{"BillingPeriodStart", focusTime(r.BillingPeriodStart), "2024-03-01T00:00:00Z"},
		{"BillingPeriodEnd", focusTime(r.BillingPeriodEnd), "2024-04-01T00:00:00Z"},
		{"ChargePeriodStart", focusTime(r.ChargePeriodStart), "2024-03-01T00:00:00Z"},
		{"ChargePeriodEnd", focusTime(r.ChargePeriodEnd), "2024-03-02T00:00:00Z"},
		{"ChargeCategory", r.ChargeCategory, "Usage"},
		{"ChargeFrequency", r.ChargeFrequency, "Usage-Based"},
		{"BilledCost", pricing.FormatUSD(r.BilledCost), "1.00"},
		{"PricingQuantity", strconv.FormatUint(r.PricingQuantity, 10), "350"},
		{"PricingUnit", r.PricingUnit, "Tokens"},
		{"ProviderName", r.ProviderName, "openai"},
		{"ResourceId", r.ResourceId, "gpt-5"},
		{"ResourceType", r.ResourceType, "Model"},
		{"ServiceCategory", r.ServiceCategory, "AI and Machine Learning"},
		{"SubAccountId", r.SubAccountId, "eng"},
		{"x_Requests", strconv.FormatUint(r.XRequests, 10), "2"},
		{"x_CachedTokens", strconv.FormatUint(r.XCachedTokens, 10), "10"},
		{"x_CacheWriteTokens", strconv.FormatUint(r.XCacheWriteTokens, 10), "42"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	var tags map[string]string
	if err := json.Unmarshal([]byte(r.Tags), &tags); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"dept": "eng", "team": "ml", "project": "p1", "key": "kalice"}; !equalMaps(tags, want) {
		t.Errorf("Tags %v, want %v", tags, want)
	}
	if c := pricing.FormatUSD(rows[2].BilledCost); c != "123.456789012" {
		t.Errorf("claude row cost %s, want 123.456789012", c)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFocusParquetSchema: costs are exact decimals and times timestamps,
// as FOCUS readers expect, not floats or strings.
func TestFocusParquetSchema(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFocusParquet(&buf, []FocusRow{{BilledCost: 1}}); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ col, want string }{
		{"BilledCost", "DECIMAL(18,9)"},
		{"ChargePeriodStart", "TIMESTAMP(isAdjustedToUTC=true,unit=MILLIS)"},
		{"Tags", "JSON"},
	} {
		leaf, ok := f.Schema().Lookup(tc.col)
		if !ok {
			t.Fatalf("no column %s", tc.col)
		}
		if got := leaf.Node.Type().LogicalType().String(); got != tc.want {
			t.Errorf("%s logical type %s, want %s", tc.col, got, tc.want)
		}
	}
	if !slices.Contains(columnNames(f.Schema()), "x_Requests") {
		t.Error("no x_Requests column")
	}
}

func columnNames(s *parquet.Schema) []string {
	var names []string
	for _, p := range s.Columns() {
		names = append(names, p[0])
	}
	return names
}

func TestFocusExportBadMonth(t *testing.T) {
	if _, err := FocusExport(context.Background(), nil, FocusOptions{Month: "2024-3"}); err == nil {
		t.Error("accepted month 2024-3")
	}
}
