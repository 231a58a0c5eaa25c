package bedrock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/tollgate/tollgate/pkg/providers"
)

// Event-stream frame layout (AWS binary event stream): a 12-byte prelude
// (total length, headers length, prelude CRC32), headers, payload, and a
// CRC32 of everything before it; all integers big-endian.
const (
	preludeLen  = 12
	minFrameLen = preludeLen + 4
	// maxFrameSize bounds one event-stream frame, in bytes: AWS caps a
	// message at 16 MiB of payload and 128 KiB of headers.
	maxFrameSize = 16<<20 + 128<<10 + minFrameLen
	initialBuf   = 8 << 10
)

// errFrameTooLarge ends a stream whose frame outgrows maxFrameSize.
var errFrameTooLarge = errors.New("event-stream frame too large")

// framer splits an event stream into frames. Next hands out buffered
// frames without I/O, each checked before it is returned (prelude and
// message CRC32, header lengths; the tests hold it to the AWS SDK's decoder
// as the oracle: it allocates about 38 times a frame, this check none); a corrupt frame
// stops the stream and Fill then reports it. The frames it returns alias
// its buffer and are valid until the next Fill.
type framer struct {
	src        io.Reader
	buf        []byte
	start, end int   // unconsumed bytes are buf[start:end]
	err        error // a corrupt frame: returned by Fill
}

func (f *framer) reset(src io.Reader) {
	f.src, f.start, f.end, f.err = src, 0, 0, nil
	if f.buf == nil || cap(f.buf) > 1<<20 {
		f.buf = make([]byte, initialBuf)
	}
}

// Next returns the next complete, verified frame.
func (f *framer) Next() ([]byte, bool) {
	if f.err != nil {
		return nil, false
	}
	b := f.buf[f.start:f.end]
	if len(b) < preludeLen {
		return nil, false
	}
	total, ok := frameLen(b)
	if !ok {
		// Checked before the whole frame is buffered, so garbage fails at
		// once instead of waiting for the bytes its length claims.
		f.err = fmt.Errorf("%w: event-stream prelude is corrupt", providers.ErrMalformed)
		return nil, false
	}
	if len(b) < total {
		return nil, false
	}
	frame := b[:total]
	if crc32.ChecksumIEEE(frame[:total-4]) != binary.BigEndian.Uint32(frame[total-4:]) {
		f.err = fmt.Errorf("%w: event-stream frame: message CRC mismatch", providers.ErrMalformed)
		return nil, false
	}
	if _, _, ok := parseFrame(frame); !ok {
		f.err = fmt.Errorf("%w: event-stream frame: malformed headers", providers.ErrMalformed)
		return nil, false
	}
	f.start += total
	return frame, true
}

// frameLen reads a prelude: the frame's total length, and whether the
// prelude is sound (lengths in range, CRC32 matching).
func frameLen(b []byte) (int, bool) {
	total := binary.BigEndian.Uint32(b)
	headers := binary.BigEndian.Uint32(b[4:])
	if total < minFrameLen || total > maxFrameSize || headers > total-minFrameLen {
		return 0, false
	}
	return int(total), crc32.ChecksumIEEE(b[:8]) == binary.BigEndian.Uint32(b[8:])
}

// Fill reads once from the source, first moving unconsumed bytes to the
// front of the buffer and growing it when a frame needs more room. It
// returns the source's error (io.EOF at the end), or the corrupt frame's.
func (f *framer) Fill() error {
	if f.err != nil {
		return f.err
	}
	if f.start > 0 {
		n := copy(f.buf, f.buf[f.start:f.end])
		f.start, f.end = 0, n
	}
	if f.end == len(f.buf) {
		want := 2 * len(f.buf)
		if f.end >= preludeLen {
			if total, ok := frameLen(f.buf); ok {
				want = max(want, total)
			}
		}
		want = min(want, maxFrameSize)
		if want <= len(f.buf) {
			return errFrameTooLarge
		}
		grown := make([]byte, want)
		copy(grown, f.buf[:f.end])
		f.buf = grown
	}
	n, err := f.src.Read(f.buf[f.end:])
	f.end += n
	if n > 0 && err == io.EOF {
		return nil // hand out the bytes first; the next Fill reports the end
	}
	return err
}

// Buffered returns the bytes read but not yet returned as a frame.
func (f *framer) Buffered() []byte { return f.buf[f.start:f.end] }

// frameHeaders are the string headers of a frame the translation reads.
type frameHeaders struct {
	eventType, messageType, exceptionType, errorCode, errorMessage []byte
}

// parseFrame splits one frame into its headers and payload, checking every
// length against the frame's size (it does not check CRCs: the framer
// did). ok is false for a frame that is not well formed.
func parseFrame(ev []byte) (h frameHeaders, payload []byte, ok bool) {
	if len(ev) < minFrameLen {
		return h, nil, false
	}
	total := binary.BigEndian.Uint32(ev)
	hl := binary.BigEndian.Uint32(ev[4:])
	if uint64(total) != uint64(len(ev)) || hl > total-minFrameLen {
		return h, nil, false
	}
	hdr := ev[preludeLen : preludeLen+hl]
	payload = ev[preludeLen+hl : total-4]
	for len(hdr) > 0 {
		n := int(hdr[0])
		if len(hdr) < n+2 {
			return h, nil, false
		}
		name, typ := hdr[1:1+n], hdr[1+n]
		hdr = hdr[n+2:]
		var size int
		switch typ {
		case 0, 1: // true, false
		case 2: // int8
			size = 1
		case 3: // int16
			size = 2
		case 4: // int32
			size = 4
		case 5, 8: // int64, timestamp
			size = 8
		case 9: // uuid
			size = 16
		case 6, 7: // bytes, string: 2-byte length
			if len(hdr) < 2 {
				return h, nil, false
			}
			size = int(binary.BigEndian.Uint16(hdr))
			hdr = hdr[2:]
		default:
			return h, nil, false
		}
		if len(hdr) < size {
			return h, nil, false
		}
		val := hdr[:size]
		hdr = hdr[size:]
		if typ != 7 {
			continue
		}
		switch string(name) {
		case ":event-type":
			h.eventType = val
		case ":message-type":
			h.messageType = val
		case ":exception-type":
			h.exceptionType = val
		case ":error-code":
			h.errorCode = val
		case ":error-message":
			h.errorMessage = val
		}
	}
	return h, payload, true
}
