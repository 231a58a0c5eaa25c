package openai

import (
	"io"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
)

var _ providers.Provider = (*Provider)(nil)

// stream passes OpenAI SSE events through, watching for the finish reason,
// usage and errors, and hiding the usage chunk from clients that did not
// ask for it.
type stream struct {
	name         string
	includeUsage bool
	complete     bool
	usage        providers.Usage
	scratch      []byte
}

var streamPool = sync.Pool{New: func() any { return new(stream) }}

// Stream returns a pass-through decoder for c.
func (p *Provider) Stream(c *providers.Call) providers.Stream {
	if c.Endpoint == providers.Responses {
		return p.responsesStream()
	}
	s := streamPool.Get().(*stream)
	*s = stream{name: p.name, includeUsage: c.IncludeUsage, scratch: s.scratch[:0]}
	return s
}

// Framer returns nil: OpenAI streams are server-sent events.
func (s *stream) Framer(io.Reader) providers.Framer { return nil }

// Event handles one SSE event.
func (s *stream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	var data []byte
	_, data, s.scratch = sse.Parse(ev, s.scratch)
	switch {
	case len(data) == 0: // comment or keep-alive
		return append(dst, ev...), providers.More, nil
	case string(data) == "[DONE]":
		s.complete = true
		return append(dst, ev...), providers.Done, nil
	case !providers.ValidJSON(data):
		return dst, providers.Failed, providers.ErrMalformed
	}
	d := bytesString(data)
	if e := gjson.Get(d, "error"); e.Exists() {
		msg := e.Get("message").String()
		if msg == "" {
			msg = "error event"
		}
		return dst, providers.Failed, &providers.UpstreamError{Message: msg}
	}
	if fr := gjson.Get(d, "choices.0.finish_reason"); fr.Exists() && fr.Type != gjson.Null {
		s.complete = true
	}
	if u := gjson.Get(d, "usage"); u.IsObject() {
		s.usage = ParseUsage(u)
		if s.usage.Reported {
			s.usage.Tier = serviceTier(d, "service_tier")
		}
		if !s.includeUsage && emptyChoices(d) {
			return dst, providers.More, nil // the usage chunk the gateway asked for
		}
	}
	return append(dst, ev...), providers.More, nil
}

// emptyChoices reports whether the chunk is a usage-only chunk.
func emptyChoices(d string) bool {
	c := gjson.Get(d, "choices")
	return !c.Exists() || (c.IsArray() && c.Get("#").Int() == 0)
}

func (s *stream) Complete() bool         { return s.complete }
func (s *stream) Usage() providers.Usage { return s.usage }

// Close returns the decoder to its pool.
func (s *stream) Close() { streamPool.Put(s) }
