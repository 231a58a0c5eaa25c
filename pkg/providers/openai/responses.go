package openai

import (
	"bytes"
	"io"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
)

// The Responses API (POST /v1/responses) passes through like chat: the
// request gets the byte-level model rename and a clamped max_output_tokens,
// never stream_options (a Responses stream always reports usage, in its
// terminal event). Its stream is named events, each relayed as it comes:
//
//	event: response.created            ... one per stream
//	event: response.output_text.delta  ... and every other event type
//	event: response.completed          terminal: usage in response.usage
//	event: response.incomplete         terminal: cut short (max_output_tokens, content filter), usage as above
//	event: response.failed             terminal: response.error says why
//	event: error                       the stream failed
//
// There is no [DONE]. Only terminal events are parsed; every other event is
// checked to be JSON and scanned for its type and sequence number.

// responsesPresets are the presets whose servers serve /v1/responses. A
// provider without a preset (plain OpenAI semantics at a base_url) and Azure
// are assumed to serve it too.
var responsesPresets = map[string]bool{
	"openai": true, "vllm": true, "ollama": true, "lmstudio": true,
	"groq": true, "openrouter": true, "xai": true,
}

// SpeaksResponses reports whether the server serves the Responses API.
func (p *Provider) SpeaksResponses() bool { return p.responses }

// Responses event types the decoder acts on.
const (
	evCompleted  = "response.completed"
	evIncomplete = "response.incomplete"
	evFailed     = "response.failed"
	evError      = "error"
)

// responsesStream passes a Responses API stream through, watching for its
// terminal event, usage and errors.
type responsesStream struct {
	name     string
	complete bool
	usage    providers.Usage
	seq      int64 // the sequence number the next event would carry
	scratch  []byte
}

var responsesPool = sync.Pool{New: func() any { return new(responsesStream) }}

func (p *Provider) responsesStream() *responsesStream {
	s := responsesPool.Get().(*responsesStream)
	*s = responsesStream{name: p.name, scratch: s.scratch[:0]}
	return s
}

// Framer returns nil: Responses streams are server-sent events.
func (s *responsesStream) Framer(io.Reader) providers.Framer { return nil }

// Event handles one SSE event. Events other than terminal ones are passed
// on after a validity check, without being decoded. response.failed is
// passed on too (the client gets the provider's own account of the
// failure) and reported as Failed; an error event is reported as Failed
// and not passed on (the gateway writes its own error event, with the
// provider's message).
func (s *responsesStream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	var name, data []byte
	name, data, s.scratch = sse.Parse(ev, s.scratch)
	switch {
	case len(data) == 0: // comment or keep-alive
		return append(dst, ev...), providers.More, nil
	case string(data) == "[DONE]": // not sent by OpenAI; tolerated
		return append(dst, ev...), providers.Done, nil
	case !isObject(data) || !providers.ValidJSON(data):
		return dst, providers.Failed, providers.ErrMalformed
	}
	typ := bytesString(name)
	if typ == "" {
		if typ = eventType(data); typ == "" && gjson.GetBytes(data, "error").IsObject() {
			typ = evError // a chat-style {"error":{...}} event
		}
	}
	if n, ok := sequenceNumber(data); ok {
		s.seq = n + 1
	} else {
		s.seq++
	}
	switch typ {
	case evCompleted, evIncomplete:
		s.complete = true
		s.readUsage(data)
		return append(dst, ev...), providers.Done, nil
	case evFailed:
		s.readUsage(data)
		msg := gjson.GetBytes(data, "response.error.message").String()
		return append(dst, ev...), providers.Failed, &providers.UpstreamError{Message: orText(msg, "response failed")}
	case evError:
		d := bytesString(data)
		msg := gjson.Get(d, "message").String()
		if msg == "" {
			msg = gjson.Get(d, "error.message").String()
		}
		return dst, providers.Failed, &providers.UpstreamError{Message: orText(msg, "error event")}
	}
	return append(dst, ev...), providers.More, nil
}

// readUsage reads response.usage of a terminal event, when it has one.
func (s *responsesStream) readUsage(data []byte) {
	if u := gjson.GetBytes(data, "response.usage"); u.IsObject() {
		s.usage = ParseUsage(u.Raw)
		if s.usage.Reported {
			s.usage.Tier = tierOf(gjson.GetBytes(data, "response.service_tier").Raw)
		}
	}
}

// NextSequence returns the sequence number the next event of the stream
// would carry, for an error event the gateway appends.
func (s *responsesStream) NextSequence() int64 { return s.seq }

// Complete reports whether a terminal event ended the answer.
func (s *responsesStream) Complete() bool { return s.complete }

// Usage returns the usage of the terminal event.
func (s *responsesStream) Usage() providers.Usage { return s.usage }

// Close returns the decoder to its pool.
func (s *responsesStream) Close() { responsesPool.Put(s) }

var (
	typePrefix = []byte(`{"type":"`)
	seqKey     = []byte(`"sequence_number":`)
)

// eventType returns the data's "type": read in place when it is the first
// member (as OpenAI writes it), else looked up.
func eventType(data []byte) string {
	if rest, ok := bytes.CutPrefix(data, typePrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return bytesString(rest[:i])
		}
	}
	return gjson.GetBytes(data, "type").Str
}

// isObject reports whether data starts like a JSON object.
func isObject(data []byte) bool {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// sequenceNumber finds the event's top-level sequence_number without
// decoding it. A key inside a string value is preceded by a backslash and
// skipped; the value of a nested key of the same name could be read
// instead, which only affects the number of a gateway error event.
func sequenceNumber(data []byte) (int64, bool) {
	for off := 0; ; {
		i := bytes.Index(data[off:], seqKey)
		if i < 0 {
			return 0, false
		}
		i += off
		off = i + len(seqKey)
		if i > 0 && data[i-1] == '\\' {
			continue
		}
		var n int64
		j := off
		for j < len(data) && data[j] == ' ' {
			j++
		}
		start := j
		for ; j < len(data) && data[j] >= '0' && data[j] <= '9' && n < 1<<53; j++ {
			n = n*10 + int64(data[j]-'0')
		}
		return n, j > start
	}
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
