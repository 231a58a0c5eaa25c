package billing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// DefaultStreamWindow is how far back FromStream looks by default.
const DefaultStreamWindow = 24 * time.Hour

// FromStream finds the usage event of requestID in the JetStream stream
// (the usage stream, TOLLGATE_USAGE) among the events stored since from,
// reading them in order up to the stream's last sequence at the start of
// the scan, and returns the first match. Messages are batches of events
// (usage.DecodeMessage; legacy single-event messages too): a batch stored
// twice (a republish) holds the same event, so the first match is the
// event. The window bounds the work: a
// day of events at 1,000 requests/s is 86 million messages, so keep it
// short or use ClickHouse. ErrNotFound when no event in the window has
// the request id.
func FromStream(ctx context.Context, js jetstream.JetStream, stream, requestID string, from time.Time, tables ...*pricing.Table) (*Charge, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, fmt.Errorf("%w %s", ErrNotFound, requestID)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
	})
	if err != nil {
		return nil, fmt.Errorf("scan stream %s: %w", stream, err)
	}
	needle := []byte(requestID)
	var b usagev1.UsageBatch
	var buf []byte // a compressed batch's expansion
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("scan stream %s for %s: %w", stream, requestID, err)
		}
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("scan stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("scan stream %s: %w", stream, err)
			}
			plain, err := usage.Plain(m.Data(), &buf)
			if err == nil && bytes.Contains(plain, needle) && usage.DecodeMessage(plain, &b) == nil {
				for _, ev := range b.Events {
					if ev.RequestId == requestID {
						return FromEvent(ev, tables...), nil
					}
				}
			}
			if md.Sequence.Stream >= last {
				return nil, fmt.Errorf("%w %s", ErrNotFound, requestID)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("scan stream %s: %w", stream, err)
		}
		if n == 0 {
			// Nothing at or after from (the window starts after the last event).
			return nil, fmt.Errorf("%w %s", ErrNotFound, requestID)
		}
	}
}

// Store finds a request's charge in the analytics database;
// finance.Store reads ClickHouse.
type Store interface {
	Charge(ctx context.Context, requestID string, tables ...*pricing.Table) (*Charge, error)
}

// Explainer finds the Charge of a request: in Store when it is set, else in
// the usage stream over the last Window. It backs
// GET /admin/usage/{request_id}.
type Explainer struct {
	// Store is the analytics database; nil to use the stream.
	Store Store
	// JS and Stream are the usage stream, used without Store.
	JS     jetstream.JetStream
	Stream string
	// Window is how far back the stream is scanned. Default DefaultStreamWindow.
	Window time.Duration
	// Tables are price tables besides the embedded one, for the cost
	// breakdown.
	Tables []*pricing.Table
	// Current, when set, returns one more table at each call: a gateway's
	// running table (a price book or config prices), which reloads replace.
	Current func() *pricing.Table
	// Now is the clock the window ends at. Default time.Now.
	Now func() time.Time
}

// storeAt is a Store that finds a request faster knowing its department
// and second (finance.Store).
type storeAt interface {
	ChargeAt(ctx context.Context, requestID, dept string, at time.Time, tables ...*pricing.Table) (*Charge, error)
}

// ExplainAt is Explain for a request known to be of department dept at
// time at (the console's request list links carry both): a Store that can
// use them looks the request up by them, and only finds it there.
func (e *Explainer) ExplainAt(ctx context.Context, requestID, dept string, at time.Time) (*Charge, error) {
	if s, ok := e.Store.(storeAt); ok {
		return s.ChargeAt(ctx, requestID, dept, at, e.tables()...)
	}
	return e.Explain(ctx, requestID)
}

// tables are the price tables a breakdown may use.
func (e *Explainer) tables() []*pricing.Table {
	tables := e.Tables
	if e.Current != nil {
		if t := e.Current(); t != nil {
			tables = append(tables[:len(tables):len(tables)], t)
		}
	}
	return tables
}

// Explain returns requestID's Charge, or an error wrapping ErrNotFound.
func (e *Explainer) Explain(ctx context.Context, requestID string) (*Charge, error) {
	tables := e.tables()
	if e.Store != nil {
		return e.Store.Charge(ctx, requestID, tables...)
	}
	if e.JS == nil {
		return nil, errors.New("explain: neither ClickHouse nor the usage stream is configured")
	}
	now, window := time.Now, e.Window
	if e.Now != nil {
		now = e.Now
	}
	if window <= 0 {
		window = DefaultStreamWindow
	}
	return FromStream(ctx, e.JS, e.Stream, requestID, now().Add(-window), tables...)
}

// Lookup is Explain for the admin API (admin.Options.Usage): found is false,
// with a nil error, when no event has the request id.
func (e *Explainer) Lookup(ctx context.Context, requestID string) (v any, found bool, err error) {
	c, err := e.Explain(ctx, requestID)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return c, true, nil
}
