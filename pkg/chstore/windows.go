package chstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tollgate/tollgate/pkg/usage"
)

// appendWindows appends the encoding of d, the batches the Loader applied,
// to buf: the number of producers, then for each (sorted by id) its id and
// its Window's encoding, each preceded by its length, as uvarints. It is
// stored with the watermark (watermarks.windows).
func appendWindows(buf []byte, d *usage.Dedup) ([]byte, error) {
	ps := d.Producers()
	slices.Sort(ps)
	buf = binary.AppendUvarint(buf, uint64(len(ps)))
	for _, p := range ps {
		buf = binary.AppendUvarint(buf, uint64(len(p)))
		buf = append(buf, p...)
		at := len(buf)
		buf = append(buf, 0) // room for a one-byte length, the usual case
		var err error
		if buf, err = d.Window(p).AppendBinary(buf); err != nil {
			return nil, fmt.Errorf("encode window of %s: %w", p, err)
		}
		n := len(buf) - at - 1
		if n >= 0x80 {
			// Longer: move the window up to make room for the uvarint.
			var l [binary.MaxVarintLen64]byte
			k := binary.PutUvarint(l[:], uint64(n))
			buf = append(buf, l[:k-1]...)
			copy(buf[at+k:], buf[at+1:at+1+n])
			copy(buf[at:], l[:k])
			continue
		}
		buf[at] = byte(n)
	}
	return buf, nil
}

var errWindows = errors.New("malformed batch windows")

// decodeWindows decodes what appendWindows wrote; empty b is an empty
// Dedup.
func decodeWindows(b []byte) (*usage.Dedup, error) {
	d := &usage.Dedup{}
	if len(b) == 0 {
		return d, nil
	}
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	count, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errWindows
	}
	b = b[k:]
	for range count {
		p, ok1 := next()
		w, ok2 := next()
		if !ok1 || !ok2 || !usage.ValidProducerID(string(p)) {
			return nil, errWindows
		}
		if err := d.Window(string(p)).UnmarshalBinary(w); err != nil {
			return nil, fmt.Errorf("%w: producer %s: %v", errWindows, p, err)
		}
	}
	if len(b) != 0 || d.Len() != int(count) {
		return nil, errWindows
	}
	return d, nil
}
