package respcache

import (
	"encoding/binary"
	"errors"
	"iter"
	"time"
)

// Entry is one cached answer: a whole non-stream body, or the SSE events of
// a stream as they were sent to the client.
type Entry struct {
	// Stream is set for a streamed answer (events added with AppendEvent).
	Stream bool
	// Body is a non-stream answer's body as sent to the client.
	Body []byte
	// Model and Provider served the original answer (for the
	// x-tollgate-model and x-tollgate-provider headers and usage data).
	Model, Provider string
	// Usage is the original answer's token usage, for the usage data of a
	// hit and for billing hits in full.
	Usage Usage
	// Created and Expires are set by Put; Get misses an entry once Expires
	// has passed.
	Created, Expires time.Time

	events  []byte // each event preceded by its length (uvarint)
	nevents int
}

// Usage is the token usage of an answer.
type Usage struct {
	Prompt, Completion, Cached, Reasoning uint64
}

// AppendEvent adds a copy of one SSE event (including its blank line) to a
// stream entry and marks it a stream.
func (e *Entry) AppendEvent(ev []byte) {
	e.Stream = true
	e.events = binary.AppendUvarint(e.events, uint64(len(ev)))
	e.events = append(e.events, ev...)
	e.nevents++
}

// NumEvents returns the number of events of a stream entry.
func (e *Entry) NumEvents() int { return e.nevents }

// Events yields the events of a stream entry in order, each valid until the
// entry is dropped.
func (e *Entry) Events() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		b := e.events
		for len(b) > 0 {
			n, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < n {
				return
			}
			ev := b[k : k+int(n) : k+int(n)]
			b = b[k+int(n):]
			if !yield(ev) {
				return
			}
		}
	}
}

// Size returns the bytes the entry takes in the bucket, about.
func (e *Entry) Size() int {
	return len(e.Body) + len(e.events) + len(e.Model) + len(e.Provider) + 64
}

// Encoding: magic, flags, created and expires (unix ms), usage, model,
// provider, then the body or the event count and events.
const (
	magic      = "tgc1"
	flagStream = 1
)

var errCorrupt = errors.New("corrupt cache entry")

// appendEntry encodes e after dst.
func appendEntry(dst []byte, e *Entry) []byte {
	dst = append(dst, magic...)
	var flags byte
	if e.Stream {
		flags |= flagStream
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, e.Created.UnixMilli())
	dst = binary.AppendVarint(dst, e.Expires.UnixMilli())
	for _, n := range [...]uint64{e.Usage.Prompt, e.Usage.Completion, e.Usage.Cached, e.Usage.Reasoning} {
		dst = binary.AppendUvarint(dst, n)
	}
	dst = appendBytes(dst, e.Model)
	dst = appendBytes(dst, e.Provider)
	if e.Stream {
		dst = binary.AppendUvarint(dst, uint64(e.nevents))
		return appendBytes(dst, e.events)
	}
	return appendBytes(dst, e.Body)
}

func appendBytes[T string | []byte](dst []byte, b T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decodeEntry decodes b; the entry's slices alias b.
func decodeEntry(b []byte) (*Entry, error) {
	d := decoder{b: b}
	if string(d.take(len(magic))) != magic {
		return nil, errCorrupt
	}
	e := &Entry{}
	flags := d.take(1)
	e.Stream = len(flags) == 1 && flags[0]&flagStream != 0
	e.Created = time.UnixMilli(d.varint())
	e.Expires = time.UnixMilli(d.varint())
	e.Usage = Usage{Prompt: d.uvarint(), Completion: d.uvarint(), Cached: d.uvarint(), Reasoning: d.uvarint()}
	e.Model = string(d.bytes())
	e.Provider = string(d.bytes())
	if e.Stream {
		e.nevents = int(d.uvarint())
		e.events = d.bytes()
	} else {
		e.Body = d.bytes()
	}
	if d.err || len(d.b) != 0 {
		return nil, errCorrupt
	}
	if e.Stream {
		n := 0
		for range e.Events() {
			n++
		}
		if n != e.nevents {
			return nil, errCorrupt
		}
	}
	return e, nil
}

// decoder reads an encoded entry; err is set by any short read.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) take(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.err, d.b = true, nil
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.err, d.b = true, nil
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *decoder) varint() int64 {
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.err, d.b = true, nil
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err, d.b = true, nil
		return nil
	}
	return d.take(int(n))
}
