package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/router"
)

// POST /v1/responses (the OpenAI Responses API) takes the chat path: the
// same authentication, admission, routing, relay and accounting, with the
// request and its stream passed through to providers that serve the API
// (pkg/providers/openai). What differs is here: which targets may serve it,
// the shape of the gateway's own error events in its streams, and what a
// stream delivered (for estimating an aborted one).

// responsesSpeaker is a provider that can tell whether its server serves
// the Responses API; providers that are not cannot.
type responsesSpeaker interface {
	SpeaksResponses() bool
}

// speaksResponses reports whether u serves the Responses API.
func speaksResponses(u *upstream) bool {
	s, ok := u.prov.(responsesSpeaker)
	return ok && s.SpeaksResponses()
}

// checkEndpoint refuses, before admission, a Responses API request that
// the requested model cannot serve: every target of its route must speak
// the API (a route that could serve it or not, depending on which target
// is picked, would fail at random). Background responses are refused: the
// gateway bills a response when it completes, and a background one
// completes after the request has ended. Other endpoints pass.
func (st *state) checkEndpoint(rr *router.Route, info *reqInfo) *apiError {
	ep, model := info.ep, info.model
	if ep != epResponses {
		return nil
	}
	for _, t := range rr.Config().Targets {
		if u := st.upstreamNamed(t.Provider); u != nil && !speaksResponses(u) {
			return unsupportedResponses(model, u)
		}
	}
	if info.background {
		return errBadRequest("unsupported_parameter", "background",
			"background responses are not supported: the gateway bills a response when it completes, within the request; send background: false")
	}
	return nil
}

// unsupportedResponses is the answer for a model whose provider does not
// serve the Responses API.
func unsupportedResponses(model string, u *upstream) *apiError {
	return errBadRequest(codeUnsupportedEP, "model", fmt.Sprintf(
		"the model %q is served by provider %s (kind %s), which does not speak the Responses API; use /v1/chat/completions for this model",
		model, u.name, u.kind))
}

// upstreamNamed returns the provider called name, or nil.
func (st *state) upstreamNamed(name string) *upstream {
	for i, p := range st.cfg.Providers {
		if p.Name == name {
			return st.ups[i]
		}
	}
	return nil
}

// skipResponsesTarget passes over a target that cannot serve a Responses
// API request. Only a fallback model's target can be one (checkEndpoint
// vetted the requested model's), so the plan moves on as it would have
// after prev, the previous call's outcome: another target is tried only
// when that failure allowed it. The skipped target's health is not
// touched. It reports whether another call follows.
func skipResponsesTarget(ctx context.Context, rec *record, rt *route, a *router.Attempt, plan *router.Plan, prev router.Outcome, last **apiError) bool {
	a.Done(router.Outcome{Class: router.Canceled}, 0)
	if *last == nil {
		*last = unsupportedResponses(rec.model, rt.up)
	}
	return prev.Class != router.Success && plan.ShouldRetry(prev) && plan.Backoff(ctx) == nil
}

// sequencer is a Responses stream decoder that knows the sequence number
// the next event would carry.
type sequencer interface {
	NextSequence() int64
}

// appendResponsesErrorEvent writes e as a Responses API error event:
// event: error, data {"type":"error","code","message","param","sequence_number"}.
func appendResponsesErrorEvent(b []byte, e *apiError, s providers.Stream) []byte {
	var seq int64
	if sq, ok := s.(sequencer); ok {
		seq = sq.NextSequence()
	}
	b = append(b, "event: error\ndata: {\"type\":\"error\",\"code\":"...)
	b = append(b, jsonString(orDefault(e.Code, e.Type))...)
	b = append(b, `,"message":`...)
	b = append(b, jsonString(e.Message)...)
	b = append(b, `,"param":null,"sequence_number":`...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, "}\n\n"...)
}

// appendOutputText appends the text of a Responses API answer's output
// items (message parts, refusals, reasoning text; function call
// arguments) to dst as raw JSON string text. Other answers have no output.
func appendOutputText(dst, answer []byte) []byte {
	gjson.GetBytes(answer, "output").ForEach(func(_, item gjson.Result) bool {
		appendText := func(v gjson.Result) {
			if v.Type == gjson.String && len(v.Raw) > 2 && len(dst) < maxDelivered {
				dst = append(dst, v.Raw[1:len(v.Raw)-1]...)
			}
		}
		appendText(item.Get("arguments"))
		item.Get("content").ForEach(func(_, part gjson.Result) bool {
			appendText(part.Get("text"))
			appendText(part.Get("refusal"))
			return true
		})
		return true
	})
	return dst
}

var (
	dataField = []byte("data:")
	deltaType = []byte(`.delta"`)
)

// appendResponsesContent appends the "delta" text of the delta events
// (output text, refusals, reasoning, function call arguments) in evs to
// dst, as raw JSON string text, for estimating the tokens of a stream that
// ended without usage. Other events are skipped without being decoded.
func appendResponsesContent(dst, evs []byte) []byte {
	for len(evs) > 0 && len(dst) < maxDelivered {
		ev := evs
		if i := bytes.Index(evs, []byte("\n\n")); i >= 0 {
			ev, evs = evs[:i], evs[i+2:]
		} else {
			evs = nil
		}
		i := bytes.Index(ev, dataField)
		if i < 0 || !bytes.Contains(ev[i:], deltaType) {
			continue
		}
		d := bytes.TrimLeft(ev[i+len(dataField):], " ")
		if v := gjson.GetBytes(d, "delta"); v.Type == gjson.String && len(v.Raw) > 2 {
			dst = append(dst, v.Raw[1:len(v.Raw)-1]...)
		}
	}
	return dst
}
