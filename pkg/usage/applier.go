package usage

import (
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// Verdict is what an Applier says of one stream message.
type Verdict uint8

const (
	// Legacy is a single event published before batches existed (no
	// producer id): the caller applies it the legacy way, by stream
	// sequence and event id.
	Legacy Verdict = iota
	// Fresh is a batch's first appearance in stream order: apply its
	// events.
	Fresh
	// Repeat is a batch that appeared earlier in the stream (republished
	// after the stream's duplicate window, e.g. by a spool drain): skip it.
	Repeat
	// Covered is a batch at or below its producer's restored checkpoint:
	// it is accounted for already (see Applier.Restore); skip it.
	Covered
)

// Applier is the exactly-once filter every reader of the usage stream
// shares (the budget consumer, replay, reconcile). Fed the stream's
// messages in stream order, it says which batches count: each
// (producer, seq) once, at its first appearance in the stream, so the
// verdict on a message is a function of the stream's order alone,
// whichever process computes it. Its state is one Window per producer
// (Dedup) plus, per producer restored from a checkpoint, the stream
// sequence the checkpoint covers. A reader that does not start at the
// stream's first message must either feed the earlier messages first or
// Restore a checkpoint taken at or after its starting point. Not safe for
// concurrent use.
type Applier struct {
	d     Dedup
	cover map[string]uint64 // producer -> stream seq its restored Window covers
}

// Apply takes the message at stream sequence streamSeq, decoded by
// DecodeMessage into b, and returns its verdict, and how many of b's
// producer's batches were given up as lost to make room (see
// Window.Apply): never applied, counted once.
func (a *Applier) Apply(streamSeq uint64, b *usagev1.UsageBatch) (v Verdict, lost uint64) {
	if b.ProducerId == "" {
		return Legacy, 0
	}
	if streamSeq <= a.cover[b.ProducerId] {
		return Covered, 0
	}
	fresh, lost := a.d.Apply(b.ProducerId, b.Seq)
	if !fresh {
		return Repeat, lost
	}
	return Fresh, lost
}

// Restore sets producer's state from a checkpoint: w is its Window after
// every message of the stream up to and including streamSeq. Messages of
// producer at or below streamSeq are then Covered (their fresh events were
// applied before the checkpoint was taken); later ones are judged by w.
func (a *Applier) Restore(producer string, w *Window, streamSeq uint64) {
	*a.d.Window(producer) = *w
	if a.cover == nil {
		a.cover = make(map[string]uint64)
	}
	a.cover[producer] = streamSeq
}

// Covers returns the highest stream sequence a restored checkpoint covers
// (0 when none was restored).
func (a *Applier) Covers() uint64 {
	var top uint64
	for _, c := range a.cover {
		top = max(top, c)
	}
	return top
}

// Unapplied is Dedup.Unapplied over what the Applier was fed or restored.
func (a *Applier) Unapplied(data []byte, b *usagev1.UsageBatch) bool { return a.d.Unapplied(data, b) }

// Window returns producer's Window (an empty one for a producer not seen
// yet), for writing a checkpoint. The caller must not change it.
func (a *Applier) Window(producer string) *Window { return a.d.Window(producer) }

// Missing sums Window.Missing over every producer: batches between a
// producer's floor and the highest seq applied that have not arrived yet
// (a spool still draining) or never will (lost).
func (a *Applier) Missing() uint64 {
	var n uint64
	for _, w := range a.d.m {
		n += w.Missing()
	}
	return n
}

// Producers is the number of producers the Applier knows.
func (a *Applier) Producers() int { return a.d.Len() }

// Reset forgets every producer.
func (a *Applier) Reset() {
	a.d = Dedup{}
	a.cover = nil
}
