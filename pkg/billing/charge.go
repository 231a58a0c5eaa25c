// Package billing says how one request was charged: its usage event with
// the cost broken down by the price-table entry and the budgets checked at
// admission (Charge), read from the usage stream (FromStream) or, through a
// Store, from the analytics database. It backs GET /admin/usage/{request_id}
// and tollctl explain.
//
// It links no database driver, so the gateway can import it; the
// ClickHouse query lives in pkg/finance. Money is int64 nano-USD.
package billing

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// ErrNotFound is wrapped by every lookup that finds no event with the
// request id.
var ErrNotFound = errors.New("no usage event for request")

// Charge is one request's usage event, with what its cost was made of.
type Charge struct {
	EventID, RequestID string
	Time               time.Time
	Issuer, Subject    string
	KeyID              string
	Dept, Team         string
	Project            string
	RequestedModel     string
	ServedModel        string
	Provider           string
	Deployment         string
	Route              string
	Attempts           uint32
	Fallbacks          []string
	Endpoint           string
	StatusCode         uint32
	ErrorType          string
	PromptTokens       uint64
	CompletionTokens   uint64
	CachedTokens       uint64
	CacheWriteTokens   uint64
	ReasoningTokens    uint64
	Estimated          bool
	// Recovered: the gateway ended before recording the request, and the
	// event was published from its begun record (the recovery rule,
	// docs/usage-recovery.md); Estimated is set too.
	Recovered      bool
	CostNano       int64
	PricingVersion string
	// ServiceTier is the provider's service tier when it has a price of
	// its own ("flex", "priority"); empty for the standard tier.
	ServiceTier string
	// Price is the served model's price in the table of PricingVersion
	// (the provider's entry, provider/model, before the model's), when
	// that table is the embedded one or one passed to BreakDown
	// (PriceKnown); then the parts below break CostNano down (their sum is
	// within a nano-USD per part of it, each part being rounded on its
	// own), at the prices of the request's service tier and prompt size
	// (Price.Effective: the service tier's, else the long-context tier's
	// above its size).
	Price                                                      pricing.Price
	PriceKnown                                                 bool
	InputNano, CachedNano, CacheWriteNano, OutputNano, ReqNano int64
	// Budgets are the limits checked at admission, with the spend and
	// headroom of that moment (empty when none applied, or for events
	// recorded before the gateway kept them).
	Budgets []BudgetCheck
}

// BudgetCheck is one budget limit a request was checked against at
// admission (usage event field budgets). Amounts are nano-USD.
type BudgetCheck struct {
	Scope, Value, Period, PeriodStart string
	// FromToken is true for a limit from the token's budgets claim.
	FromToken bool
	// SpentNano is the spend at admission (applied total plus other
	// requests' reservations); ReservedNano this request's own
	// reservation; HeadroomNano = LimitNano - SpentNano.
	LimitNano, SpentNano, ReservedNano, HeadroomNano int64
}

// FromEvent is the Charge of a usage event read from the stream.
func FromEvent(ev *usagev1.UsageEvent, tables ...*pricing.Table) *Charge {
	c := &Charge{
		EventID: ev.EventId, RequestID: ev.RequestId, Time: time.Unix(0, ev.Timestamp).UTC(),
		Issuer: ev.Issuer, Subject: ev.Subject, KeyID: ev.KeyId, Dept: ev.Dept, Team: ev.Team, Project: ev.Project,
		RequestedModel: ev.RequestedModel, ServedModel: ev.ServedModel, Provider: ev.Provider, Deployment: ev.Deployment,
		Route: ev.Route, Attempts: ev.Attempts, Fallbacks: ev.Fallbacks, Endpoint: ev.Endpoint,
		StatusCode: ev.StatusCode, ErrorType: ev.ErrorType, PromptTokens: ev.PromptTokens,
		CompletionTokens: ev.CompletionTokens, CachedTokens: ev.CachedTokens, CacheWriteTokens: ev.CacheWriteTokens,
		ReasoningTokens: ev.ReasoningTokens, Estimated: ev.Estimated, Recovered: ev.Recovered, CostNano: ev.CostNanoUsd, PricingVersion: ev.PricingVersion,
		ServiceTier: ev.ServiceTier,
	}
	if c.Fallbacks == nil {
		c.Fallbacks = []string{}
	}
	for _, b := range ev.Budgets {
		c.Budgets = append(c.Budgets, BudgetCheck{Scope: b.Scope, Value: b.Value, Period: b.Period, PeriodStart: b.PeriodStart,
			FromToken: b.FromToken, LimitNano: b.LimitNanoUsd, SpentNano: b.SpentNanoUsd, ReservedNano: b.ReservedNanoUsd,
			HeadroomNano: b.HeadroomNanoUsd})
	}
	c.BreakDown(tables...)
	return c
}

// BreakDown fills Price and the cost parts when the event's price table is
// the embedded one or among tables (found by version: pass the table a
// gateway's price_book and prices build, config.Config.PriceTable);
// otherwise it leaves them unset. The entry is found as the gateway finds
// it: the provider's (Table.LookupAt on the event's deployment), else the
// served model's.
func (c *Charge) BreakDown(tables ...*pricing.Table) {
	for _, t := range append([]*pricing.Table{pricing.Default()}, tables...) {
		if t == nil || t.Version != c.PricingVersion {
			continue
		}
		if p, ok := t.LookupAt(c.Provider, c.Deployment); ok {
			c.breakdown(p)
		} else if p, ok := t.Lookup(c.ServedModel); ok {
			c.breakdown(p)
		}
	}
}

func (c *Charge) breakdown(p pricing.Price) {
	c.Price, c.PriceKnown = p, true
	e := p.Effective(c.PromptTokens, pricing.ParseServiceTier(c.ServiceTier))
	cached := min(c.CachedTokens, c.PromptTokens)
	written := min(c.CacheWriteTokens, c.PromptTokens-cached)
	c.InputNano = pricing.Price{InputPerM: e.InputPerM}.Cost(pricing.Usage{PromptTokens: c.PromptTokens - cached - written})
	c.CachedNano = pricing.Price{InputPerM: e.CachedInputPerM}.Cost(pricing.Usage{PromptTokens: cached})
	c.CacheWriteNano = pricing.Price{InputPerM: e.CacheWriteInputPerM}.Cost(pricing.Usage{PromptTokens: written})
	c.OutputNano = pricing.Price{OutputPerM: e.OutputPerM}.Cost(pricing.Usage{CompletionTokens: c.CompletionTokens})
	c.ReqNano = max(p.PerRequest, 0)
}

// WriteText prints c for a terminal.
func (c *Charge) WriteText(w io.Writer) error {
	var b strings.Builder
	f := func(k, format string, a ...any) {
		fmt.Fprintf(&b, "%-16s "+format+"\n", append([]any{k + ":"}, a...)...)
	}
	f("request", "%s (event %s)", c.RequestID, c.EventID)
	f("time", "%s", c.Time.UTC().Format(time.RFC3339))
	f("principal", "subject %s, key %s, issuer %s", c.Subject, c.KeyID, c.Issuer)
	f("charged to", "dept %s, team %s, project %s", c.Dept, c.Team, c.Project)
	f("route", "%s: %s requested, %s served by %s (%s)", c.Route, c.RequestedModel, c.ServedModel, c.Provider, c.Deployment)
	f("attempts", "%d, fallbacks %s", c.Attempts, orNone(c.Fallbacks))
	f("outcome", "%s status %d %s", c.Endpoint, c.StatusCode, c.ErrorType)
	est := ""
	switch {
	case c.Recovered:
		est = " (recovered and estimated: the gateway ended before recording the request; billed by the recovery rule)"
	case c.Estimated:
		est = " (estimated: the provider reported no usage)"
	}
	f("tokens", "%d in (%d cached, %d written to cache), %d out (%d reasoning)%s", c.PromptTokens, c.CachedTokens,
		c.CacheWriteTokens, c.CompletionTokens, c.ReasoningTokens, est)
	f("price table", "%s", c.PricingVersion)
	if c.PriceKnown {
		e := c.Price.Effective(c.PromptTokens, pricing.ParseServiceTier(c.ServiceTier))
		tier := ""
		if c.ServiceTier != "" {
			tier = " (service tier " + c.ServiceTier + ")"
		} else if l := c.Price.Long; l.AbovePromptTokens > 0 && c.PromptTokens > l.AbovePromptTokens {
			tier = fmt.Sprintf(" (long context: prompt above %d tokens)", l.AbovePromptTokens)
		}
		f("prices", "%s in, %s cached in, %s cache write, %s out per million tokens%s; %s per request",
			usd(e.InputPerM), usd(e.CachedInputPerM), usd(e.CacheWriteInputPerM), usd(e.OutputPerM), tier, usd(c.Price.PerRequest))
		f("cost", "%s input + %s cached + %s cache write + %s output + %s per request = %s",
			usd(c.InputNano), usd(c.CachedNano), usd(c.CacheWriteNano), usd(c.OutputNano), usd(c.ReqNano), usd(c.CostNano))
	} else {
		f("prices", "table %s is not the embedded one (%s) nor one given (tollctl explain --prices FILE or --config FILE): no breakdown",
			c.PricingVersion, pricing.Default().Version)
		f("cost", "%s", usd(c.CostNano))
	}
	if len(c.Budgets) == 0 {
		f("budgets", "none checked")
	}
	for _, bc := range c.Budgets {
		f("budget", "%s", bc.String())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String reads "dept=research month 2026-11: limit $500.00, spent $212.30
// at admission, headroom $287.70 (reserved $0.01)".
func (b BudgetCheck) String() string {
	who := b.Scope
	if b.Scope != "global" {
		who += "=" + b.Value
	}
	period := b.Period
	if b.PeriodStart != "" {
		period += " " + b.PeriodStart
	}
	src := ""
	if b.FromToken {
		src = " (token limit)"
	}
	return fmt.Sprintf("%s %s%s: limit %s, spent %s at admission, headroom %s (this request reserved %s)",
		who, period, src, usd(b.LimitNano), usd(b.SpentNano), usd(b.HeadroomNano), usd(b.ReservedNano))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " -> ")
}

func usd(nano int64) string {
	if nano < 0 {
		return "-$" + pricing.FormatUSD(-nano)
	}
	return "$" + pricing.FormatUSD(nano)
}
