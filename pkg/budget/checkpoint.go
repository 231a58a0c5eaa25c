package budget

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// DedupBucket holds the budget consumer's exactly-once checkpoints, one key
// per producer (the producer id): which of the producer's batches are in
// the spend totals, as of a stream sequence. It belongs with Bucket: purge
// both or neither. Each value is the stream sequence the checkpoint covers
// (uvarint) followed by the producer's usage.Window (Window.AppendBinary).
const DedupBucket = "tollgate_spend_dedup"

// errCheckpoint marks a checkpoint value that does not decode.
var errCheckpoint = errors.New("malformed checkpoint")

// appendCheckpoint appends the encoding of w as of stream sequence cover.
func appendCheckpoint(b []byte, cover uint64, w *usage.Window) []byte {
	b = binary.AppendUvarint(b, cover)
	b, _ = w.AppendBinary(b) // never fails
	return b
}

// parseCheckpoint decodes what appendCheckpoint wrote.
func parseCheckpoint(data []byte, w *usage.Window) (cover uint64, err error) {
	cover, n := binary.Uvarint(data)
	if n <= 0 {
		return 0, errCheckpoint
	}
	if err := w.UnmarshalBinary(data[n:]); err != nil {
		return 0, fmt.Errorf("%w: %v", errCheckpoint, err)
	}
	return cover, nil
}

// loadCheckpoints resets c.applier to the checkpoints in DedupBucket.
//
// Why no stream read follows: a checkpoint of producer P covering stream
// sequence C is written, after the totals, by every fold that changed P's
// Window, before that fold's messages are acknowledged, and a checkpoint
// is never replaced by one covering less (writeCheckpoints). So every
// message of P at or below c.safe (acknowledged, hence folded) that
// changed P's Window is at or below C: P's Window as stored is its state
// after every message up to c.safe, or later, which is exact for what this
// Consumer reads next (messages above C are judged by the Window, those
// at or below it are Covered). It must run after c.safe was read, never
// before: a checkpoint written in between only covers more.
func (c *Consumer) loadCheckpoints(ctx context.Context) error {
	c.applier.Reset()
	clear(c.cpRev)
	w, err := c.dedupKV.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var win usage.Window
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("read checkpoints: watch closed")
			}
			if e == nil {
				c.m.missing.Set(float64(c.applier.Missing()))
				c.stale = false
				return nil
			}
			cover, err := parseCheckpoint(e.Value(), &win)
			if err != nil {
				return fmt.Errorf("checkpoint %s: %w", e.Key(), err)
			}
			c.applier.Restore(e.Key(), &win, cover)
			c.cpRev[e.Key()] = e.Revision()
		case <-ctx.Done():
			return fmt.Errorf("read checkpoints: %w", ctx.Err())
		}
	}
}

// writeCheckpoints stores the Window of every producer the fold changed, as
// of stream sequence top (the fold's last message), with optimistic
// concurrency. A stored checkpoint covering top or more (another instance
// is ahead) is left as it is: it is exact too, and replacing it would
// lose what it covers.
func (c *Consumer) writeCheckpoints(ctx context.Context, top uint64) error {
	var seen usage.Window
	for p := range c.touched {
		c.cpBuf = appendCheckpoint(c.cpBuf[:0], top, c.applier.Window(p))
		rev := c.cpRev[p]
		for try := 0; ; try++ {
			var err error
			var next uint64
			if rev == 0 {
				next, err = c.dedupKV.Create(ctx, p, c.cpBuf)
			} else {
				next, err = c.dedupKV.Update(ctx, p, c.cpBuf, rev)
			}
			if err == nil {
				c.cpRev[p] = next
				break
			}
			if !isConflict(err) && !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("write checkpoint %s: %w", p, err)
			}
			if try == 10 {
				return fmt.Errorf("write checkpoint %s: still conflicting after %d tries", p, try)
			}
			c.m.conflicts.Inc()
			e, err := c.dedupKV.Get(ctx, p)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				rev = 0
				continue
			}
			if err != nil {
				return fmt.Errorf("read checkpoint %s: %w", p, err)
			}
			if cover, err := parseCheckpoint(e.Value(), &seen); err == nil && cover >= top {
				c.cpRev[p] = e.Revision()
				break
			}
			rev = e.Revision()
		}
	}
	return nil
}

// maxHistoryCheck bounds how far checkHistory walks down the stream.
const maxHistoryCheck = 4096

// checkHistory checks, at start, that the stream still holds at the
// consumer's reference point a message this consumer folded: the higher of
// c.safe (the consumer's ack floor: every message up to it is folded) and
// the highest stream sequence a checkpoint covers (what the folds reached,
// which outlives a consumer deleted with its stream). A batch there that
// the checkpoints never applied, or a stream that now ends below that
// point, means the stream lost messages it had acknowledged and gave their
// sequences to new ones (every node of a cluster killed at once), or was
// recreated. The totals skip events at or below their as_of_seq (and the
// durable consumer never delivers sequences at or below its ack floor
// again), so the new messages' events are missing from the totals: the
// check counts it (history_changes_total) and logs the sequences, from the
// lowest such message found walking down (at most maxHistoryCheck), and
// the way to recompute the totals of a period (tollctl replay --to
// budgets, with the budget service stopped). tollctl reconcile shows the
// difference. Legacy single-event messages carry no batch id and are not
// judged.
func (c *Consumer) checkHistory(ctx context.Context) error {
	ref := max(c.safe, c.applier.Covers())
	if ref == 0 {
		return nil
	}
	s, err := c.js.Stream(ctx, c.o.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", c.o.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", c.o.Stream, err)
	}
	// Walk down from ref, or from the stream's end when that is below it
	// (low < ref then, whatever the walk finds).
	to := min(ref, info.State.LastSeq)
	low := to
	var b usagev1.UsageBatch
	for seq := to; seq > 0 && to-seq < maxHistoryCheck; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // removed by age or by an operator: no new message there
		}
		if err != nil {
			return fmt.Errorf("read stream %s at %d: %w", c.o.Stream, seq, err)
		}
		if usage.DecodeMessage(m.Data, &b) != nil || b.ProducerId == "" || c.applier.Seen(b.ProducerId, b.Seq) {
			break
		}
		low = seq - 1
	}
	if low == ref {
		return nil
	}
	c.m.historyChanges.Inc()
	c.log.Error("budget: the usage stream does not hold what the spend totals were folded from: it lost acknowledged messages and reused their sequences, or was recreated. "+
		"Events of the stream's messages from from_seq up to folded_seq are missing from the spend totals; recompute the periods they fall in with "+
		"`tollctl replay --to budgets --period month:YYYY-MM` (and day:YYYY-MM-DD) while the budget service is stopped, and check with `tollctl reconcile`",
		"folded_seq", ref, "ack_floor", c.safe, "stream_last_seq", info.State.LastSeq, "from_seq", low+1)
	return nil
}
