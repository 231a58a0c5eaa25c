package usage

import (
	"encoding/binary"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// Field numbers of usagev1.UsageBatch, which the publisher encodes by hand
// so that each event is marshalled once, straight into the batch's buffer.
const (
	fieldProducerID = 1000
	fieldSeq        = 1001
	fieldEvents     = 1002
	fieldCreated    = 1003
	fieldResumed    = 1004
)

const (
	// DefaultBatchSize is Config.BatchSize's default, in events.
	DefaultBatchSize = 256
	// DefaultBatchBytes is Config.BatchBytes's default: a quarter of NATS's
	// default max_payload (1 MiB), so that a batch always fits in one
	// message.
	DefaultBatchBytes = 256 << 10
)

// maxBatchHead bounds the size of appendBatchHead's output: the tags,
// a producer id of up to maxProducerID bytes and three varints.
const maxBatchHead = 4*3 + 1 + maxProducerID + 3*binary.MaxVarintLen64

// batchHead is what a batch carries besides its events.
type batchHead struct {
	seq       uint64 // 0 for a legacy single-event record
	createdMs int64
	resumed   bool
}

// batch is a formed batch: numbered, with the events it carries. It owns
// its events slice.
type batch struct {
	head   batchHead
	events []*usagev1.UsageEvent
}

// appendBatchHead appends the encoding of a UsageBatch's fields other than
// its events; appendEvent then adds each event. The fields may come in any
// order on the wire, so the two can be concatenated.
func appendBatchHead(b []byte, producer string, h batchHead) []byte {
	b = protowire.AppendTag(b, fieldProducerID, protowire.BytesType)
	b = protowire.AppendString(b, producer)
	b = protowire.AppendTag(b, fieldSeq, protowire.VarintType)
	b = protowire.AppendVarint(b, h.seq)
	if h.createdMs != 0 {
		b = protowire.AppendTag(b, fieldCreated, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(h.createdMs))
	}
	if h.resumed {
		b = protowire.AppendTag(b, fieldResumed, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// eventSize is how many bytes appendEvent adds for an event whose encoding
// takes n bytes (its SizeVT).
func eventSize(n int) int {
	return protowire.SizeTag(fieldEvents) + protowire.SizeBytes(n)
}

// appendEvent appends ev, whose encoding takes n bytes (ev.SizeVT()), as
// one element of a batch's events. Events are encoded with the code
// protoc-gen-go-vtproto generates (usage_vtproto.pb.go): the same bytes as
// proto.Marshal, without its reflection tables, at several times its speed.
// On an error b is returned unchanged.
func appendEvent(b []byte, ev *usagev1.UsageEvent, n int) ([]byte, error) {
	out := protowire.AppendTag(b, fieldEvents, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(n))
	mark := len(out)
	out = slices.Grow(out, n)[:mark+n]
	if w, err := ev.MarshalToSizedBufferVT(out[mark:]); err != nil || w != n {
		if err == nil {
			err = errSizeChanged
		}
		return b, err
	}
	return out, nil
}

// appendBatch appends the whole encoding of bt. Events that cannot be
// marshalled are left out and counted in bad.
func appendBatch(b []byte, producer string, bt *batch) (_ []byte, bad int) {
	b = appendBatchHead(b, producer, bt.head)
	for _, ev := range bt.events {
		var err error
		if b, err = appendEvent(b, ev, ev.SizeVT()); err != nil {
			bad++
		}
	}
	return b, bad
}

type encodeError string

func (e encodeError) Error() string { return string(e) }

// errSizeChanged reports an event whose size changed while it was
// marshalled: the caller modified it after Enqueue.
const errSizeChanged = encodeError("usage event changed while it was marshalled")
