package budget

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

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
//
// The checkpoint of the producer whose batch is at top goes first. The
// writes are one per producer, so a crash can stop them half way, and
// until the fold's messages are delivered again checkHistory judges by
// what was written: the highest sequence a checkpoint covers, and whether
// the Window of the batch stored there holds it. Written first, that
// Window holds it whenever any checkpoint covers top.
func (c *Consumer) writeCheckpoints(ctx context.Context, top uint64) error {
	first := ""
	if _, ok := c.touched[c.lastProducer]; ok && c.lastSeq == top {
		first = c.lastProducer
		if err := c.writeCheckpoint(ctx, first, top); err != nil {
			return err
		}
	}
	for p := range c.touched {
		if p == first {
			continue
		}
		if err := c.writeCheckpoint(ctx, p, top); err != nil {
			return err
		}
	}
	return nil
}

// writeCheckpoint stores producer p's Window as of stream sequence top
// (writeCheckpoints).
func (c *Consumer) writeCheckpoint(ctx context.Context, p string, top uint64) error {
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
		var seen usage.Window
		if cover, err := parseCheckpoint(e.Value(), &seen); err == nil && cover >= top {
			c.cpRev[p] = e.Revision()
			break
		}
		rev = e.Revision()
	}
	if c.afterCheckpoint != nil {
		return c.afterCheckpoint(p)
	}
	return nil
}

// checkHistory checks, before the first fold and after the message
// iterator failed or the connection reconnected (c.historyDue), that the
// stream still holds at the consumer's reference point a message the folds
// applied: the higher of c.safe (every message up to it is folded) and the
// highest stream sequence a restored checkpoint covers (what the folds
// reached, which outlives a consumer deleted with its stream). In a stream
// that kept its history, every batch at or below that point was applied,
// skipped as a repeat or given up, so no Window finds it unapplied
// (usage.Dedup.Unapplied). A batch there that they never applied, or a
// stream that now ends below that point, means the stream lost messages it
// had acknowledged and gave their sequences to new ones (every node of a
// cluster killed at once), or was recreated. The totals skip events at or
// below their as_of_seq, and process skips messages at or below c.safe, so
// those new batches would never be folded.
//
// The checkpoints it judges by are read again first: another instance
// sharing the durable writes one checkpoint per producer, one after the
// other, and one that is between them may have a checkpoint covering the
// fold's last message while another producer's does not hold that
// message's batch yet (writeCheckpoints writes that producer's first, but
// a fold of the other instance may be covering more meanwhile).
//
// So checkHistory reads the usage.HistoryCheckDepth messages up to that
// point and publishes every batch among them that the Windows never
// applied again, unchanged, as a spool drain does: the copy lands after
// the stream's end, above the reference point, where it is folded, and
// every other reader (the analytics loader, replay, reconcile) takes the
// batch at its first appearance and the copy as a republish. A copy's
// Nats-Msg-Id is the batch's with the reference point appended, so
// instances that check together store it once within the duplicate
// window; one published again later (a crash before the copy was folded)
// is skipped by the Windows. While the stream ends below the reference
// point a copy would land at or under it, so the check waits, due again
// before every fold, until newer messages took the stream past it. It
// counts a change in history_changes_total and the copies in
// history_republished_batches_total, and logs both. Without a Window
// (nothing folded yet, a stream of legacy events only, or a dedup bucket
// purged without the totals) there is nothing to judge by, and legacy
// single-event messages are never judged. A stream that ends far below
// the reference point (one recreated under totals folded from a long
// history) is beyond this repair: only its last usage.HistoryCheckDepth
// messages below the point are read once it passes it.
func (c *Consumer) checkHistory(ctx context.Context) error {
	c.m.historyChecks.Inc()
	ref := max(c.safe, c.applier.Covers())
	if ref == 0 || c.applier.Producers() == 0 {
		c.historyDue = false // nothing folded, or no Window to judge by
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
	last := info.State.LastSeq
	if last < ref {
		if !c.historyShort {
			c.historyShort = true
			c.m.historyChanges.Inc()
			c.log.Error("budget: the usage stream ends below what the spend totals were folded from: it lost acknowledged messages, or was recreated; "+
				"batches stored up to folded_seq that the totals never counted are published again once the stream passes it",
				"folded_seq", ref, "stream_last_seq", last)
		}
		return nil // due again before the next fold
	}
	var b usagev1.UsageBatch
	if !c.historyShort {
		m, err := s.GetMsg(ctx, ref)
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("read stream %s at %d: %w", c.o.Stream, ref, err)
		}
		if err != nil || !c.applier.Unapplied(m.Data, &b) { // not found: removed by age or by an operator
			c.historyDue = false
			return nil
		}
		// Another instance sharing the durable may be between the
		// checkpoint writes of one fold (one per producer, the first
		// already covering ref): read them again before calling it a
		// change.
		if c.beforeHistoryReload != nil {
			c.beforeHistoryReload()
		}
		if err := c.loadCheckpoints(ctx); err != nil {
			return err
		}
		if !c.applier.Unapplied(m.Data, &b) {
			c.historyDue = false
			return nil
		}
		c.m.historyChanges.Inc()
	}
	from := uint64(1)
	if ref > usage.HistoryCheckDepth {
		from = ref - usage.HistoryCheckDepth + 1
	}
	var again int
	err = c.readRange(ctx, from, ref, func(m jetstream.Msg, _ uint64) error {
		if !c.applier.Unapplied(m.Data(), &b) {
			return nil
		}
		id := usage.BatchMsgID(b.ProducerId, b.Seq) + ":after-" + strconv.FormatUint(ref, 10)
		if _, err := c.js.Publish(ctx, m.Subject(), m.Data(), jetstream.WithMsgID(id)); err != nil {
			return fmt.Errorf("publish batch %s again: %w", id, err)
		}
		again++
		return nil
	})
	c.m.historyRepublished.Add(float64(again))
	if err != nil {
		return err // due again: copies already published are skipped as repeats
	}
	c.log.Error("budget: the usage stream holds, at or below what the spend totals were folded from, batches they never counted: it lost acknowledged messages and reused their sequences, or was recreated; "+
		"those batches are published again so that they are folded",
		"folded_seq", ref, "ack_floor", c.safe, "stream_last_seq", last, "checked_from_seq", from, "republished_batches", again)
	c.historyDue, c.historyShort = false, false
	return nil
}
