package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// streamGetter opens the audit stream; jetstream.JetStream is one.
type streamGetter interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// List returns the events whose Time is at or after since (all when zero),
// in stream order (oldest first), up to the stream's last message when
// List started. It seeks to since by the stream's own timestamps, then
// filters by Time. A missing stream holds no events. Undecodable messages
// are skipped.
func List(ctx context.Context, js streamGetter, since time.Time) ([]Event, error) {
	s, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", Stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", Stream, err)
	}
	var out []Event
	for {
		batch, err := c.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", Stream, err)
		}
		n := 0
		done := false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if e, err := Decode(m.Data()); err == nil && !e.Time.Before(since) {
				out = append(out, e)
			}
			if md.Sequence.Stream >= last {
				done = true
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read stream %s: %w", Stream, err)
		}
		if done || n == 0 {
			return out, nil
		}
	}
}
