package usage

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/klauspost/compress/s2"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// BatchSubjectPrefix starts the subject of every batch; the producer id
// follows it. Legacy single-event messages use SubjectPrefix + <dept>,
// which has one token fewer, so the two never share a subject.
const BatchSubjectPrefix = SubjectPrefix + "batch."

// maxProducerID bounds a producer id's length.
const maxProducerID = 64

// producerEncoding writes producer ids: lower-case letters and digits.
var producerEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewProducerID returns a fresh producer id: 80 random bits, 16 characters
// of lower-case letters and digits, valid as a subject token and a KV key.
func NewProducerID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return producerEncoding.EncodeToString(b[:])
}

// ValidProducerID reports whether id can name a producer: 1 to 64 ASCII
// letters, digits, '-' or '_'.
func ValidProducerID(id string) bool {
	if id == "" || len(id) > maxProducerID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// BatchSubject is the subject a producer's batches are published on.
func BatchSubject(producer string) string { return BatchSubjectPrefix + producer }

// BatchMsgID is a batch's Nats-Msg-Id: "<producer>:<seq>". The stream's
// duplicate window drops a quick republish early; consumers drop the rest.
func BatchMsgID(producer string, seq uint64) string {
	return producer + ":" + strconv.FormatUint(seq, 10)
}

// ErrBadBatch marks a stream message that is neither a valid batch nor a
// legacy single event.
var ErrBadBatch = errors.New("usage: malformed batch")

// DecodeMessage decodes one stream or spool message into b, which it resets
// first. A batch fills b as published (compressed or not, see Compress). A
// legacy message (one encoded UsageEvent, written before batches existed)
// fills b with that event alone and no producer: b.ProducerId == "" tells
// the caller to apply it the legacy way (stream sequence and event id). b's
// events are newly allocated, so the caller may keep them.
func DecodeMessage(data []byte, b *usagev1.UsageBatch) error {
	if !Compressed(data) {
		return decodeMessage(data, b, false)
	}
	buf := plainBufs.Get().(*[]byte)
	defer plainBufs.Put(buf)
	plain, err := Plain(data, buf)
	if err != nil {
		b.Reset()
		return err
	}
	return decodeMessage(plain, b, false) // UnmarshalVT copies the strings
}

// plainBufs holds the buffers DecodeMessage expands compressed messages
// into.
var plainBufs = sync.Pool{New: func() any { return new([]byte) }}

// DecodeMessageAliased is DecodeMessage for a caller that reads b only
// while data stays unchanged and until its next decode into b: a batch's
// strings share data's bytes (a compressed batch's: *plain, which holds
// its expansion and must stay unchanged as long) instead of being copies
// (no allocation per string), so a string kept longer must be cloned, and
// b's events are those of the previous decode into b, reset and refilled
// (no allocation per event once b has held a batch as large), so an event
// kept longer must be cloned (proto.Clone). The budget consumer, which
// keeps a few scope values of each event, decodes so, with one plain
// buffer that it reuses for every message.
func DecodeMessageAliased(data []byte, b *usagev1.UsageBatch, plain *[]byte) error {
	data, err := Plain(data, plain)
	if err != nil {
		b.ResetVT()
		return err
	}
	return decodeMessage(data, b, true)
}

func decodeMessage(data []byte, b *usagev1.UsageBatch, aliased bool) error {
	if aliased {
		b.ResetVT() // keeps the events for reuse
	} else {
		b.Reset()
	}
	if err := unmarshal(data, b, aliased); err != nil {
		return fmt.Errorf("%w: %v", ErrBadBatch, err)
	}
	if b.ProducerId == "" {
		if b.Seq != 0 || len(b.Events) != 0 {
			return fmt.Errorf("%w: batch fields without a producer id", ErrBadBatch)
		}
		ev := &usagev1.UsageEvent{}
		if err := proto.Unmarshal(data, ev); err != nil {
			return fmt.Errorf("%w: %v", ErrBadBatch, err)
		}
		b.Reset()
		b.Events = []*usagev1.UsageEvent{ev}
		return nil
	}
	if !ValidProducerID(b.ProducerId) {
		return fmt.Errorf("%w: producer id %q", ErrBadBatch, b.ProducerId)
	}
	if b.Seq == 0 {
		return fmt.Errorf("%w: producer %s: seq 0", ErrBadBatch, b.ProducerId)
	}
	for i, ev := range b.Events {
		if ev == nil {
			return fmt.Errorf("%w: producer %s seq %d: event %d is empty", ErrBadBatch, b.ProducerId, b.Seq, i)
		}
	}
	return nil
}

// unmarshal decodes a batch as proto.Unmarshal does, by the faster way
// when it can: the generated UnmarshalVT reads the wire format without
// reflection, but it is more lenient. It does not check that strings are
// UTF-8 (nor any string a later copy of the same field replaces), it
// takes a 10-byte varint holding more than 64 bits, it takes field numbers
// above the largest valid one, and it refuses a known field sent with the
// wrong wire type (proto.Unmarshal keeps that as an unknown field). So it
// runs only on data that batchShape().valid finds as every batch a producer
// writes: known fields of their wire type, in-range varints, UTF-8
// strings, nested messages likewise; anything else (a legacy event, whose
// fields are all unknown to a batch, or a damaged message) goes to
// proto.Unmarshal. FuzzDecodeMessage holds the two to the same result.
// aliased decodes with UnmarshalVTUnsafe, whose strings share data's
// bytes.
func unmarshal(data []byte, b *usagev1.UsageBatch, aliased bool) error {
	if batchStart(data) && batchShape().valid(data) {
		var err error
		if aliased {
			err = b.UnmarshalVTUnsafe(data)
		} else {
			err = b.UnmarshalVT(data)
		}
		if err == nil {
			return nil
		}
	}
	b.Reset()
	return proto.Unmarshal(data, b)
}

// batchStart reports whether data starts as every batch a producer writes
// does: with producer_id (appendBatchHead writes it first). A legacy event
// starts with a field of its own, so it goes to proto.Unmarshal without a
// first attempt.
func batchStart(data []byte) bool {
	return len(data) > len(producerTag) && string(data[:len(producerTag)]) == producerTag
}

// producerTag is the encoded tag of UsageBatch.producer_id.
var producerTag = string(protowire.AppendTag(nil, fieldProducerID, protowire.BytesType))

// compressedMark starts a compressed message: an s2 block of the batch's
// encoding follows it. A protobuf message never starts with a zero byte
// (field number 0 is invalid), so no batch or legacy event is mistaken
// for one, and a reader that predates compression refuses it as
// malformed instead of misreading it (docs/budgets.md: upgrade readers first).
const compressedMark = 0x00

// maxPlain bounds a compressed message's expansion: a batch is at most
// maxRecord bytes encoded, so a larger claim is damage, not a batch.
const maxPlain = maxRecord

// Compressed reports whether data is a compressed batch (Compress).
func Compressed(data []byte) bool { return len(data) > 0 && data[0] == compressedMark }

// Compress appends to dst the compressed form of a batch's encoding: the
// mark, then the batch as one s2 block. Usage events repeat most of their
// strings (principal, model, provider, endpoint), so a batch shrinks to
// about a quarter, and so does what the stream stores, replicates and
// delivers to each consumer. A batch that does not shrink (random
// strings) is appended as it is, so a message never outgrows its batch.
func Compress(dst, batch []byte) []byte {
	n := len(dst)
	dst = slices.Grow(dst, 1+s2.MaxEncodedLen(len(batch)))
	dst = append(dst, compressedMark)
	z := s2.Encode(dst[n+1:cap(dst)], batch)
	if 1+len(z) >= len(batch) {
		return append(dst[:n], batch...)
	}
	return dst[:n+1+len(z)]
}

// Plain returns the plain encoding of a stream or spool message: data
// itself, or a compressed message's expansion in *buf (grown when it is
// too small). A search for bytes of an event (tollctl explain's request
// id) reads this, not the message.
func Plain(data []byte, buf *[]byte) ([]byte, error) {
	if !Compressed(data) {
		return data, nil
	}
	z := data[1:]
	n, err := s2.DecodedLen(z)
	if err == nil && n > maxPlain {
		err = fmt.Errorf("expands to %d bytes, over %d", n, maxPlain)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: compressed: %v", ErrBadBatch, err)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	plain, err := s2.Decode((*buf)[:cap(*buf)], z)
	if err != nil {
		return nil, fmt.Errorf("%w: compressed: %v", ErrBadBatch, err)
	}
	return plain, nil
}
