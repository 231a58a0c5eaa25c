package loadgen

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"
)

// maxSSELine bounds one SSE line (and one event's data) so a server that
// never sends a newline cannot grow the checker without limit.
const maxSSELine = 1 << 20

// sseCheck validates an OpenAI chat completion stream as it is read, one
// buffer at a time, without keeping the stream. Events follow the SSE
// rules: lines end in LF or CRLF, data lines of one event are joined with
// LF, a blank line dispatches the event, lines starting with ':' are
// comments, and event, id and retry fields are accepted and ignored. Any
// other line is a bad_sse error: an OpenAI-compatible stream has none.
//
// The zero value is not ready: call reset before each stream.
type sseCheck struct {
	want      int    // expected content chunks; 0 means at least one
	wantUsage bool   // the request set stream_options.include_usage
	usage     int    // usage chunks (no choice, a usage object)
	line      []byte // a line split across reads
	data      []byte // data of the event being read
	hasData   bool
	id        []byte // raw JSON id of the first chunk
	content   int    // chunks with a non-empty delta.content
	finish    int    // chunks with a finish_reason
	done      bool   // [DONE] seen
	err       kind   // first problem found; kindOK while the stream is fine
}

// reset prepares the checker for a new stream expecting want content
// chunks, and a usage chunk when wantUsage is set (none otherwise).
func (c *sseCheck) reset(want int, wantUsage bool) {
	*c = sseCheck{want: want, wantUsage: wantUsage, line: c.line[:0], data: c.data[:0], id: c.id[:0]}
}

// feed checks the next bytes of the stream. After an error it ignores
// further input; the caller reads c.err.
func (c *sseCheck) feed(p []byte) {
	for len(p) > 0 && c.err == kindOK {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(c.line)+len(p) > maxSSELine {
				c.err = kindBadSSE
				return
			}
			c.line = append(c.line, p...)
			return
		}
		ln := p[:i]
		if len(c.line) > 0 {
			c.line = append(c.line, ln...)
			ln = c.line
		}
		p = p[i+1:]
		c.processLine(ln)
		c.line = c.line[:0]
	}
}

// end checks what the stream as a whole must satisfy once the body ended
// cleanly, and returns the outcome.
func (c *sseCheck) end() kind {
	if c.err == kindOK && len(c.line) > 0 {
		c.processLine(c.line)
		c.line = c.line[:0]
	}
	if c.err == kindOK && c.hasData {
		c.dispatch()
	}
	if c.err != kindOK {
		return c.err
	}
	switch {
	case !c.done:
		return kindNoDone
	case c.want > 0 && c.content != c.want, c.want == 0 && c.content == 0:
		return kindChunkCount
	case c.finish == 0:
		return kindNoFinish
	case c.wantUsage && c.usage != 1:
		return kindUsage
	case !c.wantUsage && c.usage > 0:
		return kindUnwantedUsage
	}
	return kindOK
}

func (c *sseCheck) processLine(ln []byte) {
	if n := len(ln); n > 0 && ln[n-1] == '\r' {
		ln = ln[:n-1]
	}
	if len(ln) == 0 {
		if c.hasData {
			c.dispatch()
		}
		return
	}
	if ln[0] == ':' {
		return
	}
	name, value := ln, []byte(nil)
	if i := bytes.IndexByte(ln, ':'); i >= 0 {
		name, value = ln[:i], ln[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) { // no allocation: compared in place
	case "data":
		if c.done {
			c.err = kindDataAfterDone
			return
		}
		if c.hasData {
			c.data = append(c.data, '\n')
		}
		if len(c.data)+len(value) > maxSSELine {
			c.err = kindBadSSE
			return
		}
		c.data = append(c.data, value...)
		c.hasData = true
	case "event", "id", "retry":
	default:
		c.err = kindBadSSE
	}
}

// dispatch checks one complete event's data.
func (c *sseCheck) dispatch() {
	data := c.data
	c.data = c.data[:0]
	c.hasData = false
	if string(data) == "[DONE]" {
		c.done = true
		return
	}
	s := unsafe.String(unsafe.SliceData(data), len(data)) // results do not outlive data
	if !gjson.Valid(s) {
		c.err = kindBadJSON
		return
	}
	// Targeted lookups skip values without parsing them; an event without
	// choices is looked at for an error object only then.
	choices := gjson.Get(s, "choices")
	if !choices.Exists() && gjson.Get(s, "error").Exists() {
		c.err = kindErrorEvent
		return
	}
	id := gjson.Get(s, "id")
	if id.Type != gjson.String || len(id.Raw) <= 2 {
		c.err = kindNoID
		return
	}
	if len(c.id) == 0 {
		c.id = append(c.id, id.Raw...)
	} else if string(c.id) != id.Raw {
		c.err = kindIDMismatch
		return
	}
	choice := choices.Get("0")
	if !choice.Exists() {
		if gjson.Get(s, "usage").IsObject() {
			c.usage++ // the usage chunk has "choices": []
		}
		return
	}
	if ct := choice.Get("delta.content"); ct.Type == gjson.String && len(ct.Raw) > 2 {
		c.content++
	}
	if fr := choice.Get("finish_reason"); fr.Exists() && fr.Type != gjson.Null {
		c.finish++
		if c.finish > 1 {
			c.err = kindMultipleFinish
		}
	}
}
