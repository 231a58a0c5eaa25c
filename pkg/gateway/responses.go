package gateway

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/router"
)

// POST /v1/responses (the OpenAI Responses API) takes the chat path: the
// same authentication, admission, routing, relay and accounting, with the
// request and its stream passed through to providers that serve the API
// (pkg/providers/openai), and translated for the others
// (responses_translate.go). What differs is here: what the model's targets
// require before admission, the shape of the gateway's own error events in
// its streams, and what a stream delivered (for estimating an aborted one).

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

// checkEndpoint refuses, before admission, a Responses API request its
// model cannot serve. Background responses are refused: the gateway bills a
// response when it completes, and a background one completes after the
// request has ended. When a target of the model does not speak the API,
// the request is translated now (responses_translate.go), so that one it
// cannot express, or a stateful feature a translated target cannot keep,
// is refused before it is admitted. Other endpoints pass.
func (st *state) checkEndpoint(rr *router.Route, cs *callState) *apiError {
	if cs.info.ep != epResponses {
		return nil
	}
	if cs.info.background {
		return errBadRequest("unsupported_parameter", "background",
			"background responses are not supported: the gateway bills a response when it completes, within the request; send background: false")
	}
	for _, t := range rr.Config().Targets {
		if u := st.upstreamNamed(t.Provider); u != nil && !speaksResponses(u) {
			return cs.translateResponses()
		}
	}
	return nil
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
