package gemini

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

// This file is the native pass-through for Gemini clients served by a
// Gemini provider: bodies and events go through unchanged (the model is in
// the URL path), while usage, completion and errors are tracked.

// Native methods BuildNative serves.
const (
	MethodGenerate    = "generateContent"
	MethodStream      = "streamGenerateContent"
	MethodCountTokens = "countTokens"
)

// BuildNative fills req for a client's Gemini request body to method
// (MethodGenerate, MethodStream, MethodCountTokens) of model, with this
// provider's credentials; a stream is asked for as server-sent events.
// The body is passed unchanged, but for countTokens'
// generateContentRequest.model, which is set to model, and for
// generationConfig.maxOutputTokens, which clamp, when positive, lowers
// to it (the budget's clamp). No client header is passed on. An unedited
// body is not copied: it must stay valid until the request is sent.
func (p *Provider) BuildNative(req *fasthttp.Request, body []byte, model, method string, clamp int64) error {
	var buf [256]byte
	path := append(buf[:0], p.prefix...)
	path, err := appendModelPath(path, model)
	if err != nil {
		return err
	}
	path = append(path, ':')
	path = append(path, method...)
	req.Header.SetMethod(fasthttp.MethodPost)
	uri := req.URI()
	uri.SetScheme(p.scheme)
	uri.SetHost(p.host)
	uri.SetPathBytes(path)
	if method == MethodStream {
		uri.SetQueryString("alt=sse")
	}
	req.Header.SetContentType("application/json")
	if len(p.apiKey) > 0 {
		req.Header.SetBytesV(KeyHeader, p.apiKey)
	}
	for _, h := range p.headers {
		req.Header.Set(h[0], h[1])
	}
	if m := gjson.GetBytes(body, "generateContentRequest.model"); method == MethodCountTokens && m.Type == gjson.String && m.Index > 0 {
		out := req.SwapBody(nil)[:0]
		out = append(out, body[:m.Index]...)
		out = rawjson.AppendString(out, modelResource(model))
		out = append(out, body[m.Index+len(m.Raw):]...)
		req.SwapBody(out)
		return nil
	}
	if clamp > 0 && method != MethodCountTokens {
		out, err := ClampOutput(req.SwapBody(nil)[:0], body, clamp)
		if err != nil {
			return err
		}
		req.SwapBody(out)
		return nil
	}
	req.SetBodyRaw(body)
	return nil
}

// ClampOutput appends to dst the Gemini request body with its output
// limit (generationConfig.maxOutputTokens, either key also in snake case)
// at most n: lowered when above it or not a number, added when absent
// (with generationConfig when that is absent too). A body that is not an
// object, whose generationConfig is not one, or that writes either key
// twice (the gateway would read one and the upstream maybe the other) is
// a *providers.ParamError.
func ClampOutput(dst, body []byte, n int64) ([]byte, error) {
	s := bytesString(body)
	if i := rawjson.SkipSpace(s, 0); i >= len(s) || s[i] != '{' {
		return dst, paramErr("body", "the request body must be a JSON object")
	}
	gcRaw, gcAt, err := onlyMember(s, 0, "generationConfig", "generation_config")
	if err != nil {
		return dst, err
	}
	if gcRaw == "" {
		i := strings.IndexByte(s, '{') + 1
		dst = append(dst, body[:i]...)
		dst = append(dst, `"generationConfig":{"maxOutputTokens":`...)
		dst = strconv.AppendInt(dst, n, 10)
		dst = append(dst, '}')
		if rest := strings.TrimLeft(s[i:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
			dst = append(dst, ',')
		}
		return append(dst, body[i:]...), nil
	}
	if gcRaw[0] != '{' {
		return dst, paramErr("generationConfig", "must be an object")
	}
	mRaw, mAt, err := onlyMember(gcRaw, gcAt, "maxOutputTokens", "max_output_tokens")
	if err != nil {
		return dst, err
	}
	if mRaw != "" {
		if v := gjson.Parse(mRaw); v.Type == gjson.Number && v.Int() > 0 && v.Int() <= n {
			return append(dst, body...), nil
		}
		dst = append(dst, body[:mAt]...)
		dst = strconv.AppendInt(dst, n, 10)
		return append(dst, body[mAt+len(mRaw):]...), nil
	}
	i := gcAt + 1 // just after generationConfig's "{"
	dst = append(dst, body[:i]...)
	dst = append(dst, `"maxOutputTokens":`...)
	dst = strconv.AppendInt(dst, n, 10)
	if rest := strings.TrimLeft(gcRaw[1:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
		dst = append(dst, ',')
	}
	return append(dst, body[i:]...), nil
}

// onlyMember finds the one member of the object obj (at byte offset base
// of the body) named by either of two keys: its raw value and the value's
// offset in the body ("" when there is none). Both keys, or one twice, is
// a *providers.ParamError.
func onlyMember(obj string, base int, key, snake string) (raw string, at int, err error) {
	n := 0
	rawjson.EachMember(obj, func(k, v string, i int) bool {
		if rawjson.KeyIs(k, key) || rawjson.KeyIs(k, snake) {
			n++
			raw, at = v, base+i
		}
		return true
	})
	if n > 1 {
		return "", 0, paramErr(key, "appears more than once")
	}
	return raw, at, nil
}

// UsageOf reads a GenerateContentResponse body's usageMetadata as the
// gateway bills it (see the package documentation).
func UsageOf(body []byte) providers.Usage {
	return parseUsage(gjson.GetBytes(body, "usageMetadata").Raw)
}

// nativeStream passes Gemini events through unchanged.
type nativeStream struct {
	name     string
	complete bool
	u        providers.Usage
	scratch  []byte
	last     []byte // the text of the latest event
}

var nativePool = sync.Pool{New: func() any { return new(nativeStream) }}

// NativeStream returns a decoder that passes Gemini SSE events through
// unchanged, reading usage (usageMetadata) and completion (a
// finishReason, which ends the stream with Done). An error event is not
// passed on: it returns Failed with a *providers.UpstreamError, for the
// gateway to answer in its own words.
func (p *Provider) NativeStream() providers.Stream {
	s := nativePool.Get().(*nativeStream)
	*s = nativeStream{name: p.name, scratch: s.scratch[:0], last: s.last[:0]}
	return s
}

func (s *nativeStream) Framer(io.Reader) providers.Framer { return nil }
func (s *nativeStream) Complete() bool                    { return s.complete }
func (s *nativeStream) Usage() providers.Usage            { return s.u }

var _ providers.ContentStream = (*nativeStream)(nil)

// LastContent returns the text parts of the latest event (raw JSON string
// text), for estimating a cut stream's tokens; valid until the next event.
func (s *nativeStream) LastContent() string { return bytesString(s.last) }

// Close returns the decoder to its pool.
func (s *nativeStream) Close() {
	if cap(s.scratch) > 64<<10 {
		s.scratch = nil
	}
	if cap(s.last) > 64<<10 {
		s.last = nil
	}
	nativePool.Put(s)
}

// Event passes one event through and tracks what it says.
func (s *nativeStream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	var data []byte
	_, data, s.scratch = sse.Parse(ev, s.scratch)
	s.last = s.last[:0]
	if len(data) == 0 {
		return append(dst, ev...), providers.More, nil
	}
	if !providers.ValidJSON(data) {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: stream event is not JSON", s.name, providers.ErrMalformed)
	}
	d := bytesString(data)
	if e := member(d, "error"); e != "" {
		msg := gjson.Get(e, "message").String()
		if msg == "" {
			msg = "error event"
		}
		return dst, providers.Failed, &providers.UpstreamError{Message: msg}
	}
	if u := member(d, "usageMetadata"); len(u) > 0 && u[0] == '{' {
		s.u = parseUsage(u)
	}
	cand := firstElem(member(d, "candidates"))
	forEachElem(member(member(cand, "content"), "parts"), func(part string) bool {
		if t := member(part, "text"); isString(t) && member(part, "thought") != "true" {
			s.last = append(s.last, inner(t)...)
		}
		return true
	})
	dst = append(dst, ev...)
	if isString(member(cand, "finishReason")) {
		s.complete = true
		return dst, providers.Done, nil
	}
	return dst, providers.More, nil
}

// NewPassthrough returns an encoder for a natively served stream: the
// Gemini events NativeStream passed through go out unchanged (SSE), or
// as the elements of the JSON array form (array), which the event with a
// finishReason closes. Fail writes a Gemini error in the same form.
func NewPassthrough(array bool) *Encoder {
	e := NewEncoder("", "", array)
	e.passthrough = true
	return e
}

// passEvents is Events for a pass-through encoder.
func (e *Encoder) passEvents(dst, events []byte) ([]byte, error) {
	if !e.array {
		return append(dst, events...), nil
	}
	for len(events) > 0 && !e.closed {
		i := bytes.Index(events, []byte("\n\n"))
		j := i + 2
		if k := bytes.Index(events, []byte("\r\n\r\n")); k >= 0 && (i < 0 || k < i) {
			i, j = k, k+4
		}
		if i < 0 {
			return dst, fmt.Errorf("encode gemini stream: %w: incomplete event", providers.ErrMalformed)
		}
		ev := events[:i]
		events = events[j:]
		var data []byte
		for line := range bytes.SplitSeq(ev, []byte("\n")) {
			if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:")); ok {
				data = bytes.TrimLeft(d, " ")
			}
		}
		if len(data) == 0 {
			continue
		}
		dst = e.open(dst)
		dst = append(dst, data...)
		if gjson.GetBytes(data, "candidates.0.finishReason").Type == gjson.String {
			e.closed = true
			dst = append(dst, ']')
		}
	}
	return dst, nil
}
