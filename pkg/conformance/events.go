package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// event is a usage event as read from the stream.
type event = usagev1.UsageEvent

// eventReader finds the usage events of a run in the usage stream: every
// event published after the run started, matched by request id.
type eventReader struct {
	js    jetstream.JetStream
	after uint64 // the stream's last sequence before the run
}

// newEventReader notes where the usage stream ends before the run, so only
// the run's events are read afterwards.
func newEventReader(ctx context.Context, js jetstream.JetStream) (*eventReader, error) {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, usage.StreamName)
	if err != nil {
		return nil, fmt.Errorf("open usage stream %s (is the gateway publishing to this NATS?): %w", usage.StreamName, err)
	}
	info, err := s.Info(ictx)
	if err != nil {
		return nil, fmt.Errorf("read usage stream %s: %w", usage.StreamName, err)
	}
	return &eventReader{js: js, after: info.State.LastSeq}, nil
}

// collect reads the events published since the run started until every id
// has one or wait has passed. It returns the events by request id; an id
// without an event is absent.
func (r *eventReader) collect(ctx context.Context, ids []string, wait time.Duration) (map[string]*event, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	found := make(map[string]*event, len(ids))
	c, err := r.js.OrderedConsumer(ctx, usage.StreamName, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   r.after + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("read usage stream %s: %w", usage.StreamName, err)
	}
	for len(found) < len(want) {
		left := time.Until(deadline(ctx))
		if left <= 0 {
			break
		}
		msg, err := c.Next(jetstream.FetchMaxWait(min(left, time.Second)))
		switch {
		case errors.Is(err, jetstream.ErrNoMessages), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			continue
		case err != nil:
			if ctx.Err() != nil {
				return found, nil
			}
			return nil, fmt.Errorf("read usage stream %s: %w", usage.StreamName, err)
		}
		var b usagev1.UsageBatch
		if err := usage.DecodeMessage(msg.Data(), &b); err != nil {
			continue // not ours to judge; a malformed message never matches a request id
		}
		for _, ev := range b.Events { // a legacy message is a batch of one
			if want[ev.RequestId] && found[ev.RequestId] == nil {
				found[ev.RequestId] = ev
			}
		}
	}
	return found, nil
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
