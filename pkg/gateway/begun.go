package gateway

import (
	"time"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/usage"
)

// journal records the requests whose upstream call began, so that a
// gateway killed before their usage events still bills them on its next
// start (issue #47; usage.Publisher, docs/usage-recovery.md).
type journal interface {
	Begin(b *usage.Begun)
	Progress(eventID string, completionTokens uint64)
}

// beginUpstream records, before the request's first upstream call, what
// its usage event would say and what its reservation covered; the event
// id chosen here is the one its own event carries (event), so a recovered
// event and the request's own are one event to every consumer. It costs
// the request a copy onto the publisher's queue, nothing more. Counting
// tokens calls no paid model, so it is not recorded.
func (g *Gateway) beginUpstream(rec *record, rt *route) {
	j := g.acct.Journal
	if j == nil || rec.begun.EventID != "" || rec.principal == nil || rec.path == countTokensPath {
		return
	}
	p, adm, b := rec.principal, &rec.adm, &rec.begun
	prompt := uint64(len(rec.body) / 4) // admission's first guess
	*b = usage.Begun{
		EventID:        usage.NewEventID(rec.start),
		RequestID:      rec.requestID,
		Timestamp:      rec.start.UnixNano(),
		Issuer:         p.Issuer,
		Subject:        p.Subject,
		KeyID:          p.KeyID,
		Dept:           p.Dept,
		Team:           p.Team,
		Project:        p.Project,
		RequestedModel: rec.model,
		ServedModel:    rt.upstreamModel,
		Provider:       rt.up.name,
		Deployment:     rt.deployment,
		Route:          orDefault(rec.routeName, rt.name),
		Endpoint:       rec.endpointPath(),
		Stream:         rec.stream,
		PromptTokens:   prompt,
		ReservedNano:   adm.checks.reserved,
	}
	if rec.prices != nil {
		b.PricingVersion = rec.prices.Version
	}
	if rec.path == "" {
		per := rec.call.info.maxTokens
		if per <= 0 {
			per = g.acct.OutputReserve
		}
		b.MaxCompletionTokens = uint64(mulSat(max(per, 0), max(rec.call.info.choices, 1)))
	}
	if adm.priced {
		b.PromptCostNano = adm.price.Cost(pricing.Usage{PromptTokens: prompt})
		b.OutputPerM = adm.price.OutputPerM
	}
	j.Begin(b)
}

// progress reports a stream's relayed tokens to the journal, at most every
// usage.DefaultProgressInterval: the number of content events relayed, or
// a quarter of the delivered text's bytes when that is more.
func (r *relay) progress(now time.Time) {
	if now.Before(r.nextProgress) {
		return
	}
	first := r.nextProgress.IsZero()
	r.nextProgress = now.Add(usage.DefaultProgressInterval)
	if first {
		return // the first report comes one interval after the first output
	}
	r.journal.Progress(r.rec.begun.EventID, max(r.relayed, uint64(len(r.content)/4)))
}
