package budget

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/usage"
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
