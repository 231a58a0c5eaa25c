package finance

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/parquet-go/parquet-go"

	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// FOCUS values Tollgate's rows share (FinOps Open Cost and Usage
// Specification 1.2).
const (
	FocusCurrency           = "USD"
	FocusChargeCategory     = "Usage"
	FocusChargeFrequency    = "Usage-Based"
	FocusPricingCategory    = "Standard"
	FocusServiceCategory    = "AI and Machine Learning"
	FocusServiceSubcategory = "Generative AI"
	FocusResourceType       = "Model"
	FocusSubAccountType     = "Department"
	FocusTokens             = "Tokens"
)

// FocusRow is one FOCUS 1.2 cost and usage row: the usage of one day
// (ChargePeriod, UTC), department, team, project, key, provider, served
// model and unit. Costs are nano-USD (FOCUS decimals with 9 fractional
// digits, written exactly: parquet DECIMAL(18,9) on int64, CSV via
// pricing.FormatUSD), so the rows of a month add up to the ledger's sum to
// the nano-dollar. There are no discounts or commitments between the
// gateway's price table and what it charges, so BilledCost, EffectiveCost,
// ListCost and ContractedCost are equal. Fields are named as the FOCUS
// columns (BillingAccountId, not ...ID), which the Parquet file and the CSV
// header use verbatim; columns named x_ are Tollgate's (FOCUS custom
// columns). The rows of a month are held in memory: one per day and
// combination above, not per event.
type FocusRow struct {
	BillingAccountId   string    `parquet:"BillingAccountId"`
	BillingAccountName string    `parquet:"BillingAccountName"`
	BillingCurrency    string    `parquet:"BillingCurrency"`
	BillingPeriodStart time.Time `parquet:"BillingPeriodStart,timestamp(millisecond)"`
	BillingPeriodEnd   time.Time `parquet:"BillingPeriodEnd,timestamp(millisecond)"`
	ChargePeriodStart  time.Time `parquet:"ChargePeriodStart,timestamp(millisecond)"`
	ChargePeriodEnd    time.Time `parquet:"ChargePeriodEnd,timestamp(millisecond)"`
	ChargeCategory     string    `parquet:"ChargeCategory"`
	ChargeClass        *string   `parquet:"ChargeClass,optional"` // null: no corrections
	ChargeDescription  string    `parquet:"ChargeDescription"`
	ChargeFrequency    string    `parquet:"ChargeFrequency"`
	BilledCost         int64     `parquet:"BilledCost,decimal(9:18)"`
	EffectiveCost      int64     `parquet:"EffectiveCost,decimal(9:18)"`
	ListCost           int64     `parquet:"ListCost,decimal(9:18)"`
	ContractedCost     int64     `parquet:"ContractedCost,decimal(9:18)"`
	ConsumedQuantity   uint64    `parquet:"ConsumedQuantity"`
	ConsumedUnit       string    `parquet:"ConsumedUnit"`
	PricingQuantity    uint64    `parquet:"PricingQuantity"`
	PricingUnit        string    `parquet:"PricingUnit"`
	PricingCategory    string    `parquet:"PricingCategory"`
	PricingCurrency    string    `parquet:"PricingCurrency"`
	ProviderName       string    `parquet:"ProviderName"`
	PublisherName      string    `parquet:"PublisherName"`
	InvoiceIssuerName  string    `parquet:"InvoiceIssuerName"`
	ServiceName        string    `parquet:"ServiceName"`
	ServiceCategory    string    `parquet:"ServiceCategory"`
	ServiceSubcategory string    `parquet:"ServiceSubcategory"`
	ResourceId         string    `parquet:"ResourceId"`
	ResourceName       string    `parquet:"ResourceName"`
	ResourceType       string    `parquet:"ResourceType"`
	SkuId              string    `parquet:"SkuId"`
	SubAccountId       string    `parquet:"SubAccountId"`
	SubAccountName     string    `parquet:"SubAccountName"`
	SubAccountType     string    `parquet:"SubAccountType"`
	Tags               string    `parquet:"Tags,json"` // {"dept","team","project","key"}
	XRequests          uint64    `parquet:"x_Requests"`
	XPromptTokens      uint64    `parquet:"x_PromptTokens"`
	XCompletionTokens  uint64    `parquet:"x_CompletionTokens"`
	XCachedTokens      uint64    `parquet:"x_CachedTokens"`
	XCacheWriteTokens  uint64    `parquet:"x_CacheWriteTokens"`
	XReasoningTokens   uint64    `parquet:"x_ReasoningTokens"`
}

// FocusOptions selects what FocusExport reads.
type FocusOptions struct {
	// Month is YYYY-MM (UTC); required.
	Month string
	// Dept, when set, keeps that department's usage only.
	Dept string
	// Account is BillingAccountId and BillingAccountName. Default "tollgate".
	Account string
}

// FocusExport reads a month of usage_events (FINAL, so copies of an event
// count once) and returns its FOCUS rows, ordered by day, department, team,
// project, key, provider and model. Rows of usage billed per unit other
// than tokens (images, audio seconds: the events' unit column) carry that
// unit and quantity; the others are priced in Tokens (prompt plus
// completion).
func FocusExport(ctx context.Context, conn driver.Conn, o FocusOptions) ([]FocusRow, error) {
	from, err := time.Parse("2006-01", o.Month)
	if err != nil {
		return nil, fmt.Errorf("month %q: want YYYY-MM: %w", o.Month, err)
	}
	to := from.AddDate(0, 1, 0)
	if o.Account == "" {
		o.Account = "tollgate"
	}
	q, args := chsql.Focus, []any{from.Unix(), to.Unix()}
	if o.Dept != "" {
		q, args = chsql.FocusDept, append(args, o.Dept)
	}
	rows, err := conn.Query(ctx, q.SQL, args...)
	if err != nil {
		return nil, fmt.Errorf("focus export %s: %w", o.Month, err)
	}
	defer rows.Close()
	var out []FocusRow
	for rows.Next() {
		var (
			r                            FocusRow
			day                          time.Time
			dept, team, project, key     string
			provider, model, unit        string
			requests, prompt, completion uint64
			cached, written, reasoning   uint64
			units                        uint64
			cost                         int64
		)
		if err := rows.Scan(&day, &dept, &team, &project, &key, &provider, &model, &unit,
			&requests, &prompt, &completion, &cached, &written, &reasoning, &units, &cost); err != nil {
			return nil, fmt.Errorf("focus export %s: %w", o.Month, err)
		}
		day = day.UTC()
		r.BillingAccountId, r.BillingAccountName, r.BillingCurrency = o.Account, o.Account, FocusCurrency
		r.BillingPeriodStart, r.BillingPeriodEnd = from, to
		r.ChargePeriodStart, r.ChargePeriodEnd = day, day.AddDate(0, 0, 1)
		r.ChargeCategory, r.ChargeFrequency = FocusChargeCategory, FocusChargeFrequency
		r.BilledCost, r.EffectiveCost, r.ListCost, r.ContractedCost = cost, cost, cost, cost
		r.ConsumedQuantity, r.ConsumedUnit = prompt+completion, FocusTokens
		if unit != "" {
			r.ConsumedQuantity, r.ConsumedUnit = units, unit
		}
		r.PricingQuantity, r.PricingUnit = r.ConsumedQuantity, r.ConsumedUnit
		r.PricingCategory, r.PricingCurrency = FocusPricingCategory, FocusCurrency
		r.ProviderName, r.PublisherName, r.InvoiceIssuerName, r.ServiceName = provider, provider, provider, provider
		r.ServiceCategory, r.ServiceSubcategory = FocusServiceCategory, FocusServiceSubcategory
		r.ResourceId, r.ResourceName, r.ResourceType, r.SkuId = model, model, FocusResourceType, model
		r.ChargeDescription = fmt.Sprintf("%s %s on %s", model, r.PricingUnit, provider)
		r.SubAccountId, r.SubAccountName, r.SubAccountType = dept, dept, FocusSubAccountType
		tags, _ := json.Marshal(map[string]string{"dept": dept, "team": team, "project": project, "key": key}) // strings: never fails
		r.Tags = string(tags)
		r.XRequests, r.XPromptTokens, r.XCompletionTokens = requests, prompt, completion
		r.XCachedTokens, r.XCacheWriteTokens, r.XReasoningTokens = cached, written, reasoning
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("focus export %s: %w", o.Month, err)
	}
	return out, nil
}

// focusColumns are the CSV columns, in the order of FocusRow.
var focusColumns = []struct {
	name string
	val  func(*FocusRow) string
}{
	{"BillingAccountId", func(r *FocusRow) string { return r.BillingAccountId }},
	{"BillingAccountName", func(r *FocusRow) string { return r.BillingAccountName }},
	{"BillingCurrency", func(r *FocusRow) string { return r.BillingCurrency }},
	{"BillingPeriodStart", func(r *FocusRow) string { return focusTime(r.BillingPeriodStart) }},
	{"BillingPeriodEnd", func(r *FocusRow) string { return focusTime(r.BillingPeriodEnd) }},
	{"ChargePeriodStart", func(r *FocusRow) string { return focusTime(r.ChargePeriodStart) }},
	{"ChargePeriodEnd", func(r *FocusRow) string { return focusTime(r.ChargePeriodEnd) }},
	{"ChargeCategory", func(r *FocusRow) string { return r.ChargeCategory }},
	{"ChargeClass", func(r *FocusRow) string { return "" }},
	{"ChargeDescription", func(r *FocusRow) string { return r.ChargeDescription }},
	{"ChargeFrequency", func(r *FocusRow) string { return r.ChargeFrequency }},
	{"BilledCost", func(r *FocusRow) string { return pricing.FormatUSD(r.BilledCost) }},
	{"EffectiveCost", func(r *FocusRow) string { return pricing.FormatUSD(r.EffectiveCost) }},
	{"ListCost", func(r *FocusRow) string { return pricing.FormatUSD(r.ListCost) }},
	{"ContractedCost", func(r *FocusRow) string { return pricing.FormatUSD(r.ContractedCost) }},
	{"ConsumedQuantity", func(r *FocusRow) string { return strconv.FormatUint(r.ConsumedQuantity, 10) }},
	{"ConsumedUnit", func(r *FocusRow) string { return r.ConsumedUnit }},
	{"PricingQuantity", func(r *FocusRow) string { return strconv.FormatUint(r.PricingQuantity, 10) }},
	{"PricingUnit", func(r *FocusRow) string { return r.PricingUnit }},
	{"PricingCategory", func(r *FocusRow) string { return r.PricingCategory }},
	{"PricingCurrency", func(r *FocusRow) string { return r.PricingCurrency }},
	{"ProviderName", func(r *FocusRow) string { return r.ProviderName }},
	{"PublisherName", func(r *FocusRow) string { return r.PublisherName }},
	{"InvoiceIssuerName", func(r *FocusRow) string { return r.InvoiceIssuerName }},
	{"ServiceName", func(r *FocusRow) string { return r.ServiceName }},
	{"ServiceCategory", func(r *FocusRow) string { return r.ServiceCategory }},
	{"ServiceSubcategory", func(r *FocusRow) string { return r.ServiceSubcategory }},
	{"ResourceId", func(r *FocusRow) string { return r.ResourceId }},
	{"ResourceName", func(r *FocusRow) string { return r.ResourceName }},
	{"ResourceType", func(r *FocusRow) string { return r.ResourceType }},
	{"SkuId", func(r *FocusRow) string { return r.SkuId }},
	{"SubAccountId", func(r *FocusRow) string { return r.SubAccountId }},
	{"SubAccountName", func(r *FocusRow) string { return r.SubAccountName }},
	{"SubAccountType", func(r *FocusRow) string { return r.SubAccountType }},
	{"Tags", func(r *FocusRow) string { return r.Tags }},
	{"x_Requests", func(r *FocusRow) string { return strconv.FormatUint(r.XRequests, 10) }},
	{"x_PromptTokens", func(r *FocusRow) string { return strconv.FormatUint(r.XPromptTokens, 10) }},
	{"x_CompletionTokens", func(r *FocusRow) string { return strconv.FormatUint(r.XCompletionTokens, 10) }},
	{"x_CachedTokens", func(r *FocusRow) string { return strconv.FormatUint(r.XCachedTokens, 10) }},
	{"x_CacheWriteTokens", func(r *FocusRow) string { return strconv.FormatUint(r.XCacheWriteTokens, 10) }},
	{"x_ReasoningTokens", func(r *FocusRow) string { return strconv.FormatUint(r.XReasoningTokens, 10) }},
}

// focusTime formats a FOCUS date-time: ISO 8601 in UTC.
func focusTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// WriteFocusCSV writes rows as CSV with a header of FOCUS column names;
// costs are exact decimals (e.g. 0.000123456), a null is an empty field.
func WriteFocusCSV(w io.Writer, rows []FocusRow) error {
	cw := csv.NewWriter(w)
	rec := make([]string, len(focusColumns))
	for i, c := range focusColumns {
		rec[i] = c.name
	}
	cw.Write(rec)
	for i := range rows {
		for j, c := range focusColumns {
			rec[j] = c.val(&rows[i])
		}
		cw.Write(rec)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write focus csv: %w", err)
	}
	return nil
}

// WriteFocusParquet writes rows as one Parquet file: costs DECIMAL(18,9)
// (int64 nano-USD), times TIMESTAMP(MILLIS, UTC), Tags JSON.
func WriteFocusParquet(w io.Writer, rows []FocusRow) error {
	pw := parquet.NewGenericWriter[FocusRow](w)
	if _, err := pw.Write(rows); err != nil {
		return fmt.Errorf("write focus parquet: %w", err)
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("write focus parquet: %w", err)
	}
	return nil
}
