// Package sse splits a server-sent-events byte stream into events and reads
// their fields without allocating, for relaying upstream streams event by
// event (https://html.spec.whatwg.org/multipage/server-sent-events.html).
//
// Events end at a blank line; lines end in LF or CRLF. A lone CR as a line
// terminator is not supported: no LLM provider sends it.
package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrEventTooLarge is returned by Fill when one event outgrows the reader's
// maximum buffer size.
var ErrEventTooLarge = errors.New("sse: event too large")

// Reader buffers an SSE stream and hands out complete events. The slices it
// returns alias its buffer and are valid until the next call to Fill.
type Reader struct {
	src        io.Reader
	buf        []byte
	start, end int // unconsumed bytes are buf[start:end]
	scan       int // buf[start:scan] is known to hold no event terminator
	max        int
}

// NewReader returns a Reader on src with an initial buffer of size bytes that
// may grow to maxSize bytes for one event.
func NewReader(src io.Reader, size, maxSize int) *Reader {
	if size <= 0 {
		size = 4096
	}
	if maxSize < size {
		maxSize = size
	}
	return &Reader{src: src, buf: make([]byte, size), max: maxSize}
}

// Reset points the reader at a new source, keeping its buffer.
func (r *Reader) Reset(src io.Reader) {
	r.src = src
	r.start, r.end, r.scan = 0, 0, 0
}

// Next returns the next complete event, including its terminating blank
// line, from what is already buffered. It does no I/O: ok is false when no
// complete event is buffered, and the caller should Fill.
func (r *Reader) Next() (event []byte, ok bool) {
	n := terminator(r.buf[r.scan:r.end])
	if n < 0 {
		// Keep the scan position just short of the end so a terminator
		// split across two reads is still found.
		if r.end-r.start > 3 {
			r.scan = r.end - 3
		}
		return nil, false
	}
	stop := r.scan + n
	event = r.buf[r.start:stop]
	r.start, r.scan = stop, stop
	return event, true
}

// Buffered returns the bytes read but not yet returned as an event, such as
// a final event the source ended without terminating.
func (r *Reader) Buffered() []byte { return r.buf[r.start:r.end] }

// Fill reads once from the source into the buffer, first moving unconsumed
// bytes to its front and growing it (up to max) when an event fills it. It
// returns the source's error, io.EOF at the end of the stream.
func (r *Reader) Fill() error {
	if r.start > 0 {
		n := copy(r.buf, r.buf[r.start:r.end])
		r.scan -= r.start
		r.start, r.end = 0, n
	}
	if r.end == len(r.buf) {
		if len(r.buf) >= r.max {
			return fmt.Errorf("%w: over %d bytes", ErrEventTooLarge, r.max)
		}
		grown := make([]byte, min(2*len(r.buf), r.max))
		copy(grown, r.buf[:r.end])
		r.buf = grown
	}
	n, err := r.src.Read(r.buf[r.end:])
	r.end += n
	if n > 0 && err == io.EOF {
		// Hand out the bytes first; the next Fill reports the end.
		return nil
	}
	return err
}

// terminator returns the index just past the first blank line in b (the end
// of an event), or -1.
func terminator(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
	}
}

// Parse returns the event type and data of one event. A single data line is
// returned without copying; several data lines are joined with LF into
// scratch (grown as needed), which is returned for reuse.
func Parse(event, scratch []byte) (typ, data, scratchOut []byte) {
	lines := 0
	for len(event) > 0 {
		var line []byte
		if i := bytes.IndexByte(event, '\n'); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			line, event = event, nil
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		name, value, ok := cutField(line)
		if !ok {
			continue
		}
		switch string(name) {
		case "event":
			typ = value
		case "data":
			lines++
			switch lines {
			case 1:
				data = value
			case 2:
				scratch = append(append(append(scratch[:0], data...), '\n'), value...)
				data = scratch
			default:
				scratch = append(append(scratch, '\n'), value...)
				data = scratch
			}
		}
	}
	return typ, data, scratch
}

func cutField(line []byte) (name, value []byte, ok bool) {
	if len(line) == 0 || line[0] == ':' {
		return nil, nil, false
	}
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil, true
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:i], value, true
}
