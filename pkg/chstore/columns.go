package chstore

import (
	"math"
	"time"

	"github.com/tollgate/tollgate/pkg/chsql"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// eventColumns lists the usage_events columns in the order of
// columns.slices (the catalogue's, which the insert names).
const eventColumns = chsql.EventColumns

// columns holds a batch of usage_events rows column by column, the form a
// native insert sends. Its slices are reused from batch to batch.
type columns struct {
	eventID, requestID                                []string
	ts                                                []int64 // Unix seconds
	tsMs                                              []uint64
	issuer, subject, keyID, dept, team, project       []string
	requestedModel, servedModel, provider, deployment []string
	attempts                                          []uint32
	fallbacks                                         [][]string
	route                                             []string
	promptTokens, completionTokens, cached, reasoning []uint64
	estimated                                         []uint8
	cost                                              []int64
	pricingVersion, endpoint                          []string
	stream                                            []uint8
	statusCode                                        []uint32
	errorType                                         []string
	clientAborted                                     []uint8
	latencyTotal, ttft, upstream, overhead            []uint64
	cacheHit                                          []uint8
	degradationStep                                   []string
	clampedMaxTokens                                  []uint32
	streamSeq                                         []uint64
	ingestedAt                                        []int64 // Unix seconds
	budgets                                           budgetColumns
	hedged                                            []uint8
	units                                             []uint64
	unit                                              []string
	producerID                                        []string
	batchSeq                                          []uint64
	cacheWrite                                        []uint64
	serviceTier                                       []string
	recovered                                         []uint8
	minTS, maxTS                                      uint32
	minSeq, maxSeq                                    uint64
}

// budgetColumns are the budget_* array columns: row i of each holds event
// i's budgets checked. The rows are windows on flat per-batch buffers, so
// adding an event allocates nothing once the buffers have grown.
type budgetColumns struct {
	scope, value, period, periodStart           [][]string
	fromToken                                   [][]uint8
	limit, spent, reserved, headroom            [][]int64
	flatScope, flatValue, flatPeriod, flatStart []string
	flatFrom                                    []uint8
	flatLimit, flatSpent, flatRes, flatHead     []int64
}

// add appends one event's budgets.
func (b *budgetColumns) add(checks []*usagev1.BudgetCheck) {
	n := len(b.flatScope)
	for _, c := range checks {
		b.flatScope = append(b.flatScope, c.Scope)
		b.flatValue = append(b.flatValue, c.Value)
		b.flatPeriod = append(b.flatPeriod, c.Period)
		b.flatStart = append(b.flatStart, c.PeriodStart)
		b.flatFrom = append(b.flatFrom, flag(c.FromToken))
		b.flatLimit = append(b.flatLimit, c.LimitNanoUsd)
		b.flatSpent = append(b.flatSpent, c.SpentNanoUsd)
		b.flatRes = append(b.flatRes, c.ReservedNanoUsd)
		b.flatHead = append(b.flatHead, c.HeadroomNanoUsd)
	}
	m := len(b.flatScope)
	b.scope = append(b.scope, b.flatScope[n:m:m])
	b.value = append(b.value, b.flatValue[n:m:m])
	b.period = append(b.period, b.flatPeriod[n:m:m])
	b.periodStart = append(b.periodStart, b.flatStart[n:m:m])
	b.fromToken = append(b.fromToken, b.flatFrom[n:m:m])
	b.limit = append(b.limit, b.flatLimit[n:m:m])
	b.spent = append(b.spent, b.flatSpent[n:m:m])
	b.reserved = append(b.reserved, b.flatRes[n:m:m])
	b.headroom = append(b.headroom, b.flatHead[n:m:m])
}

// reset empties the columns, keeping the memory and dropping the strings
// they referenced.
func (b *budgetColumns) reset() {
	clear(b.flatScope)
	clear(b.flatValue)
	clear(b.flatPeriod)
	clear(b.flatStart)
	*b = budgetColumns{
		scope: clearStrings(b.scope), value: clearStrings(b.value), period: clearStrings(b.period),
		periodStart: clearStrings(b.periodStart), fromToken: b.fromToken[:0],
		limit: b.limit[:0], spent: b.spent[:0], reserved: b.reserved[:0], headroom: b.headroom[:0],
		flatScope: b.flatScope[:0], flatValue: b.flatValue[:0], flatPeriod: b.flatPeriod[:0], flatStart: b.flatStart[:0],
		flatFrom: b.flatFrom[:0], flatLimit: b.flatLimit[:0], flatSpent: b.flatSpent[:0], flatRes: b.flatRes[:0], flatHead: b.flatHead[:0],
	}
}

// slices returns the column slices in eventColumns order.
func (c *columns) slices() []any {
	return []any{
		c.eventID, c.requestID, c.ts, c.tsMs, c.issuer, c.subject, c.keyID, c.dept, c.team, c.project,
		c.requestedModel, c.servedModel, c.provider, c.deployment, c.attempts, c.fallbacks, c.route,
		c.promptTokens, c.completionTokens, c.cached, c.reasoning, c.estimated,
		c.cost, c.pricingVersion, c.endpoint, c.stream, c.statusCode, c.errorType, c.clientAborted,
		c.latencyTotal, c.ttft, c.upstream, c.overhead, c.cacheHit, c.degradationStep, c.clampedMaxTokens,
		c.streamSeq, c.ingestedAt,
		c.budgets.scope, c.budgets.value, c.budgets.period, c.budgets.periodStart, c.budgets.fromToken,
		c.budgets.limit, c.budgets.spent, c.budgets.reserved, c.budgets.headroom,
		c.hedged, c.units, c.unit, c.producerID, c.batchSeq, c.cacheWrite, c.serviceTier, c.recovered,
	}
}

func (c *columns) len() int { return len(c.eventID) }

// reset empties every column, keeping the memory.
func (c *columns) reset() {
	c.budgets.reset()
	*c = columns{
		budgets: c.budgets,
		eventID: c.eventID[:0], requestID: c.requestID[:0], ts: c.ts[:0], tsMs: c.tsMs[:0],
		issuer: c.issuer[:0], subject: c.subject[:0], keyID: c.keyID[:0], dept: c.dept[:0],
		team: c.team[:0], project: c.project[:0], requestedModel: c.requestedModel[:0],
		servedModel: c.servedModel[:0], provider: c.provider[:0], deployment: c.deployment[:0],
		attempts: c.attempts[:0], fallbacks: clearStrings(c.fallbacks), route: c.route[:0],
		promptTokens: c.promptTokens[:0], completionTokens: c.completionTokens[:0],
		cached: c.cached[:0], reasoning: c.reasoning[:0], estimated: c.estimated[:0],
		cost: c.cost[:0], pricingVersion: c.pricingVersion[:0], endpoint: c.endpoint[:0],
		stream: c.stream[:0], statusCode: c.statusCode[:0], errorType: c.errorType[:0],
		clientAborted: c.clientAborted[:0], latencyTotal: c.latencyTotal[:0], ttft: c.ttft[:0],
		upstream: c.upstream[:0], overhead: c.overhead[:0], cacheHit: c.cacheHit[:0],
		degradationStep: c.degradationStep[:0], clampedMaxTokens: c.clampedMaxTokens[:0],
		streamSeq: c.streamSeq[:0], ingestedAt: c.ingestedAt[:0],
		hedged: c.hedged[:0], units: c.units[:0], unit: c.unit[:0],
		producerID: c.producerID[:0], batchSeq: c.batchSeq[:0], cacheWrite: c.cacheWrite[:0],
		serviceTier: c.serviceTier[:0], recovered: c.recovered[:0],
	}
}

// clearStrings empties s, dropping the references it held.
func clearStrings(s [][]string) [][]string {
	clear(s)
	return s[:0]
}

// Source is where a usage_events row came from: the stream message that
// carried the event and, for a batched message, the batch's producer and
// seq. A legacy single-event message has no producer and BatchSeq 0.
type Source struct {
	StreamSeq uint64
	Producer  string
	BatchSeq  uint64
}

// add appends one event, carried by src and loaded at ingested.
func (c *columns) add(e *usagev1.UsageEvent, src Source, ingested time.Time) {
	seq := src.StreamSeq
	sec := unixSeconds(e.Timestamp)
	if c.len() == 0 || sec < c.minTS {
		c.minTS = sec
	}
	if c.len() == 0 || sec > c.maxTS {
		c.maxTS = sec
	}
	if c.len() == 0 || seq < c.minSeq {
		c.minSeq = seq
	}
	c.maxSeq = max(c.maxSeq, seq)
	var ms uint64
	if e.Timestamp > 0 {
		ms = uint64(e.Timestamp / int64(time.Millisecond))
	}
	c.eventID = append(c.eventID, e.EventId)
	c.requestID = append(c.requestID, e.RequestId)
	c.ts = append(c.ts, int64(sec))
	c.tsMs = append(c.tsMs, ms)
	c.issuer = append(c.issuer, e.Issuer)
	c.subject = append(c.subject, e.Subject)
	c.keyID = append(c.keyID, e.KeyId)
	c.dept = append(c.dept, e.Dept)
	c.team = append(c.team, e.Team)
	c.project = append(c.project, e.Project)
	c.requestedModel = append(c.requestedModel, e.RequestedModel)
	c.servedModel = append(c.servedModel, e.ServedModel)
	c.provider = append(c.provider, e.Provider)
	c.deployment = append(c.deployment, e.Deployment)
	c.attempts = append(c.attempts, e.Attempts)
	fb := e.Fallbacks
	if fb == nil {
		fb = []string{}
	}
	c.fallbacks = append(c.fallbacks, fb)
	c.route = append(c.route, e.Route)
	c.promptTokens = append(c.promptTokens, e.PromptTokens)
	c.completionTokens = append(c.completionTokens, e.CompletionTokens)
	c.cached = append(c.cached, e.CachedTokens)
	c.reasoning = append(c.reasoning, e.ReasoningTokens)
	c.estimated = append(c.estimated, flag(e.Estimated))
	c.cost = append(c.cost, e.CostNanoUsd)
	c.pricingVersion = append(c.pricingVersion, e.PricingVersion)
	c.endpoint = append(c.endpoint, e.Endpoint)
	c.stream = append(c.stream, flag(e.Stream))
	c.statusCode = append(c.statusCode, e.StatusCode)
	c.errorType = append(c.errorType, e.ErrorType)
	c.clientAborted = append(c.clientAborted, flag(e.ClientAborted))
	c.latencyTotal = append(c.latencyTotal, e.LatencyTotalUs)
	c.ttft = append(c.ttft, e.TtftUs)
	c.upstream = append(c.upstream, e.UpstreamUs)
	c.overhead = append(c.overhead, e.OverheadUs)
	c.cacheHit = append(c.cacheHit, flag(e.CacheHit))
	c.degradationStep = append(c.degradationStep, e.DegradationStep)
	c.clampedMaxTokens = append(c.clampedMaxTokens, e.ClampedMaxTokens)
	c.streamSeq = append(c.streamSeq, seq)
	c.ingestedAt = append(c.ingestedAt, ingested.Unix())
	c.budgets.add(e.Budgets)
	c.hedged = append(c.hedged, flag(e.Hedged))
	c.units = append(c.units, e.Units)
	c.unit = append(c.unit, e.Unit)
	c.producerID = append(c.producerID, src.Producer)
	c.batchSeq = append(c.batchSeq, src.BatchSeq)
	c.cacheWrite = append(c.cacheWrite, e.CacheWriteTokens)
	c.serviceTier = append(c.serviceTier, e.ServiceTier)
	c.recovered = append(c.recovered, flag(e.Recovered))
}

// unixSeconds converts Unix nanoseconds to the seconds a DateTime holds,
// clamped to its range (1970 to 2106).
func unixSeconds(ns int64) uint32 {
	if ns <= 0 {
		return 0
	}
	s := ns / int64(time.Second)
	if s > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(s)
}

func flag(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
