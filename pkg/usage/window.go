package usage

import (
	"encoding/binary"
	"errors"
	"math/bits"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// WindowSize is how far above the lowest batch seq not yet seen a
// producer's batches may arrive and still be told apart. The publisher
// never sends a batch WindowSize or more seqs above its oldest unacked
// batch, so batches arrive at most that far out of order; a batch that
// falls below a Window's floor without having been seen is given up as
// lost (counted in Apply's result), never applied late.
const WindowSize = 4096

const windowWords = WindowSize / 64

// Window records which batches of one producer a consumer has applied, in
// constant space: every seq <= Floor, and those of Floor+1 ..
// Floor+WindowSize whose bit is set. The zero Window has applied nothing.
type Window struct {
	floor uint64
	bits  [windowWords]uint64 // bit i: seq floor+1+i applied
	top   uint64              // highest seq applied, or floor
}

// Floor is the seq below and at which every batch counts as applied.
func (w *Window) Floor() uint64 { return w.floor }

// Top is the highest seq applied.
func (w *Window) Top() uint64 { return max(w.top, w.floor) }

// Missing counts the seqs between Floor and Top not applied yet: batches
// still on their way (a spool draining) or lost.
func (w *Window) Missing() uint64 {
	t := w.Top()
	if t <= w.floor {
		return 0
	}
	var n uint64
	for _, b := range w.bits {
		n += uint64(bits.OnesCount64(b))
	}
	return t - w.floor - n
}

// Seen reports whether seq was applied already.
func (w *Window) Seen(seq uint64) bool {
	if seq <= w.floor {
		return true
	}
	i := seq - w.floor - 1
	if i >= WindowSize {
		return false
	}
	return w.bits[i/64]&(1<<(i%64)) != 0
}

// Apply records seq as applied. fresh is false when it had been applied
// already (the caller skips the batch). lost counts the seqs the window had
// to give up to make room, below the new floor and never seen: batches
// that cannot be applied any more.
func (w *Window) Apply(seq uint64) (fresh bool, lost uint64) {
	if w.Seen(seq) {
		return false, 0
	}
	if seq-w.floor > WindowSize {
		lost = w.slide(seq - WindowSize)
	}
	i := seq - w.floor - 1
	w.bits[i/64] |= 1 << (i % 64)
	w.top = max(w.top, seq)
	w.advance()
	return true, lost
}

// slide raises the floor to f and returns how many seqs in (old floor, f]
// had not been applied.
func (w *Window) slide(f uint64) (gaps uint64) {
	for w.floor < f {
		if w.bits[0]&1 == 0 {
			gaps++
		}
		w.shift1()
		// Skip whole empty stretches quickly.
		if w.floor < f && w.empty() {
			gaps += f - w.floor
			w.floor = f
		}
	}
	w.advance()
	return gaps
}

// advance raises the floor over the applied seqs just above it.
func (w *Window) advance() {
	for w.bits[0]&1 != 0 {
		if w.bits[0] == ^uint64(0) {
			w.shiftWord()
			continue
		}
		w.shift1()
	}
}

func (w *Window) empty() bool {
	for _, b := range w.bits {
		if b != 0 {
			return false
		}
	}
	return true
}

// shift1 moves the floor up by one.
func (w *Window) shift1() {
	for i := 0; i < windowWords-1; i++ {
		w.bits[i] = w.bits[i]>>1 | w.bits[i+1]<<63
	}
	w.bits[windowWords-1] >>= 1
	w.floor++
}

// shiftWord moves the floor up by 64.
func (w *Window) shiftWord() {
	copy(w.bits[:], w.bits[1:])
	w.bits[windowWords-1] = 0
	w.floor += 64
}

// AppendBinary appends w's encoding: floor, top and the words of the
// bitmap up to the last non-zero one, as uvarints.
func (w *Window) AppendBinary(b []byte) ([]byte, error) {
	b = binary.AppendUvarint(b, w.floor)
	b = binary.AppendUvarint(b, w.Top()-w.floor)
	n := windowWords
	for n > 0 && w.bits[n-1] == 0 {
		n--
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, x := range w.bits[:n] {
		b = binary.AppendUvarint(b, x)
	}
	return b, nil
}

// MarshalBinary encodes w (see AppendBinary).
func (w *Window) MarshalBinary() ([]byte, error) { return w.AppendBinary(nil) }

var errWindow = errors.New("usage: malformed window encoding")

// UnmarshalBinary decodes what MarshalBinary wrote.
func (w *Window) UnmarshalBinary(b []byte) error {
	*w = Window{}
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	floor, ok1 := next()
	span, ok2 := next()
	n, ok3 := next()
	if !ok1 || !ok2 || !ok3 || n > windowWords || span > WindowSize || floor+span < floor {
		return errWindow
	}
	w.floor, w.top = floor, floor+span
	for i := range n {
		x, ok := next()
		if !ok {
			return errWindow
		}
		w.bits[i] = x
	}
	if len(b) != 0 {
		return errWindow
	}
	w.advance()
	return nil
}

// Dedup is the exactly-once state of a consumer: one Window per producer.
// Its size grows with the number of producers only. Not safe for
// concurrent use.
type Dedup struct {
	m map[string]*Window
}

// Window returns producer's window, creating an empty one.
func (d *Dedup) Window(producer string) *Window {
	if d.m == nil {
		d.m = make(map[string]*Window)
	}
	w := d.m[producer]
	if w == nil {
		w = &Window{}
		d.m[producer] = w
	}
	return w
}

// Apply records batch seq of producer; see Window.Apply.
func (d *Dedup) Apply(producer string, seq uint64) (fresh bool, lost uint64) {
	return d.Window(producer).Apply(seq)
}

// HistoryCheckDepth is how many stream messages below the point it had
// read up to a reader checks with Dedup.Unapplied when the stream's
// history changed under it (acknowledged messages lost and their sequences
// reused, or the stream recreated): as many as a producer's Window spans.
const HistoryCheckDepth = WindowSize

// Unapplied decodes the stream message data into b and reports whether it
// is a batch d has not applied (without adding a Window for a producer d
// has not seen). A reader that holds every batch up to some stream
// sequence as applied finds such a batch at or below it only when the
// stream's history changed. A legacy single event (no batch id to judge
// by) and an undecodable message are not unapplied batches.
func (d *Dedup) Unapplied(data []byte, b *usagev1.UsageBatch) bool {
	if DecodeMessage(data, b) != nil || b.ProducerId == "" {
		return false
	}
	w := d.m[b.ProducerId]
	return w == nil || !w.Seen(b.Seq)
}

// Producers returns the producers d has seen, in no particular order.
func (d *Dedup) Producers() []string {
	out := make([]string, 0, len(d.m))
	for p := range d.m {
		out = append(out, p)
	}
	return out
}

// Len is the number of producers.
func (d *Dedup) Len() int { return len(d.m) }
