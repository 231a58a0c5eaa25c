package openai

import (
	"errors"
	"io"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
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
	content      string // the last event's delta.content (LastContent)
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
	s.content = ""
	_, data, s.scratch = sse.Parse(ev, s.scratch)
	switch {
	case len(data) == 0: // comment or keep-alive
		return append(dst, ev...), providers.More, nil
	case string(data) == "[DONE]":
		s.complete = true
		return append(dst, ev...), providers.Done, nil
	}
	// One pass over the chunk: validity and the top-level members read
	// here; only those members are parsed further.
	var f [len(chunkKeys)]rawjson.Field
	if err := rawjson.Scan(data, providers.MaxJSONDepth, chunkKeys[:], f[:]); err != nil &&
		!errors.Is(err, rawjson.ErrUTF8) && !errors.Is(err, rawjson.ErrNotObject) {
		return dst, providers.Failed, providers.ErrMalformed // relayed as sent when valid JSON, as encoding/json reads it
	}
	if e := f[chunkError].Raw; e != "" {
		msg := gjson.Get(e, "message").String()
		if msg == "" {
			msg = "error event"
		}
		return dst, providers.Failed, &providers.UpstreamError{Message: msg}
	}
	choices := f[chunkChoices].Raw
	fr, content := firstChoice(choices)
	if fr != "" && fr != "null" {
		s.complete = true
	}
	if rawjson.IsString(content) {
		s.content = rawjson.Inner(content)
	}
	if u := f[chunkUsage].Raw; u != "" && u[0] == '{' {
		s.usage = ParseUsage(u)
		if s.usage.Reported {
			s.usage.Tier = tierOf(f[chunkTier].Raw)
		}
		if !s.includeUsage && emptyChoices(choices) {
			return dst, providers.More, nil // the usage chunk the gateway asked for
		}
	}
	return append(dst, ev...), providers.More, nil
}

// The top-level members of a chunk that Event reads, in Scan's order.
var chunkKeys = [...]string{"error", "choices", "usage", "service_tier"}

const (
	chunkError = iota
	chunkChoices
	chunkUsage
	chunkTier
)

// emptyChoices reports whether a chunk whose choices member is choices (as
// written; "" when absent) is a usage-only chunk.
func emptyChoices(choices string) bool {
	if choices == "" {
		return true
	}
	c := gjson.Parse(choices)
	return c.IsArray() && c.Get("#").Int() == 0
}

// firstChoice returns the raw finish_reason and delta.content of the
// first element of a chunk's choices (each "" when absent; the first of
// repeated keys wins), in one pass over that element. Scan has already
// checked the chunk is valid JSON.
func firstChoice(choices string) (finishReason, content string) {
	rawjson.EachElem(choices, func(_ int, c string) bool {
		delta := false
		rawjson.EachMember(c, func(k, v string, _ int) bool {
			switch {
			case finishReason == "" && rawjson.KeyIs(k, "finish_reason"):
				finishReason = v
			case !delta && rawjson.KeyIs(k, "delta"):
				delta = true
				rawjson.EachMember(v, func(k, v string, _ int) bool {
					if rawjson.KeyIs(k, "content") {
						content = v
						return false
					}
					return true
				})
			}
			return true
		})
		return false
	})
	return finishReason, content
}

// LastContent returns the text the last event delivered.
func (s *stream) LastContent() string { return s.content }

func (s *stream) Complete() bool         { return s.complete }
func (s *stream) Usage() providers.Usage { return s.usage }

// Close returns the decoder to its pool.
func (s *stream) Close() { streamPool.Put(s) }
