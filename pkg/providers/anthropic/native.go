package anthropic

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"io"
	"sync"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

// This file is the native pass-through for Anthropic clients served by an
// Anthropic provider: bodies and events go through unchanged but for the
// model name, while usage, completion and errors are tracked.

// CountTokensPath is the path of Anthropic's token counting endpoint,
// served by BuildCountTokens.
func CountTokensPath() string { return "/v1/messages/count_tokens" }

// BuildNative fills req for a client's Messages request body, passed
// through with the model renamed to model by a byte edit (modelRaw, quotes
// included, is the body's "model" value at byte offset modelIdx; an empty
// model keeps the body unchanged) and this provider's credentials set. The
// client's anthropic-version and anthropic-beta headers (from header, may
// be nil) are passed through. An unedited body is not copied: it must stay
// valid until the request is sent.
func (p *Provider) BuildNative(req *fasthttp.Request, body []byte, model, modelRaw string, modelIdx int, header *fasthttp.RequestHeader) error {
	return p.buildNative(req, p.path, body, model, modelRaw, modelIdx, header)
}

// BuildCountTokens is BuildNative for POST /v1/messages/count_tokens.
func (p *Provider) BuildCountTokens(req *fasthttp.Request, body []byte, model, modelRaw string, modelIdx int, header *fasthttp.RequestHeader) error {
	return p.buildNative(req, p.countPath, body, model, modelRaw, modelIdx, header)
}

func (p *Provider) buildNative(req *fasthttp.Request, path, body []byte, model, modelRaw string, modelIdx int, header *fasthttp.RequestHeader) error {
	p.setRequestLine(req, path, header, true)
	if model == "" || len(modelRaw) == len(model)+2 && modelRaw[1:len(modelRaw)-1] == model {
		req.SetBodyRaw(body)
		return nil
	}
	end := modelIdx + len(modelRaw)
	if modelIdx < 0 || end > len(body) || string(body[modelIdx:end]) != modelRaw {
		return fmt.Errorf("provider %s: the model value is not at byte %d of the body", p.name, modelIdx)
	}
	out := req.SwapBody(nil)[:0]
	out = append(out, body[:modelIdx]...)
	out = rawjson.AppendString(out, model)
	out = append(out, body[end:]...)
	req.SwapBody(out)
	return nil
}

// nativeStream passes Anthropic events through unchanged.
type nativeStream struct {
	name     string
	complete bool
	u        usage
	scratch  []byte
}

var nativePool = sync.Pool{New: func() any { return new(nativeStream) }}

// NativeStream returns a decoder that passes Anthropic SSE events through
// unchanged, reading usage (message_start, message_delta) and completion
// (a stop_reason or message_stop, which ends the stream with Done). An
// error event is not passed on: it returns Failed with a
// *providers.UpstreamError, for the gateway to answer in its own words
// (Encoder.Fail).
func (p *Provider) NativeStream() providers.Stream {
	s := nativePool.Get().(*nativeStream)
	*s = nativeStream{name: p.name, scratch: s.scratch[:0]}
	return s
}

func (s *nativeStream) Framer(io.Reader) providers.Framer { return nil }
func (s *nativeStream) Complete() bool                    { return s.complete }
func (s *nativeStream) Usage() providers.Usage            { return s.u.providers() }

// Close returns the decoder to its pool.
func (s *nativeStream) Close() {
	if cap(s.scratch) > 64<<10 {
		s.scratch = nil
	}
	nativePool.Put(s)
}

// Event passes one event through and tracks what it says.
func (s *nativeStream) Event(dst, ev []byte) ([]byte, providers.State, error) {
	var name, data []byte
	name, data, s.scratch = sse.Parse(ev, s.scratch)
	if len(data) == 0 {
		return append(dst, ev...), providers.More, nil
	}
	if !providers.ValidJSON(data) {
		return dst, providers.Failed, fmt.Errorf("provider %s: %w: event is not JSON", s.name, providers.ErrMalformed)
	}
	d := bytesString(data)
	typ := inner(member(d, "type"))
	if typ == "" {
		typ = bytesString(name)
	}
	switch typ {
	case "error":
		return dst, providers.Failed, upstreamError(d)
	case "message_start":
		s.u.update(member(member(d, "message"), "usage"))
	case "message_delta":
		s.u.update(member(d, "usage"))
		if isString(member(member(d, "delta"), "stop_reason")) {
			s.complete = true
		}
	case "message_stop":
		s.complete = true
		return append(dst, ev...), providers.Done, nil
	}
	return append(dst, ev...), providers.More, nil
}

// UsageOf reads an Anthropic usage object as written (the usage member
// providers.ScanAnswer returns; "" when there is none).
func UsageOf(raw string) providers.Usage {
	var u usage
	u.update(raw)
	return u.providers()
}
