package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// Source names, as they appear in Report.Sources.
const (
	SourceMock       = "mock"
	SourceStream     = "stream"
	SourceClickHouse = "clickhouse"
	SourceBudgets    = "budgets"
)

// ErrNoStream is returned by Run when Sources has no JetStream: the stream
// is the reference every other source is compared with.
var ErrNoStream = errors.New("reconcile needs the usage stream")

// Sources are what Run reads. JetStream is required; every other source is
// compared only when given.
type Sources struct {
	// JetStream reads the usage stream and, with Budgets, the spend totals.
	JetStream jetstream.JetStream
	// Stream is the usage stream's name. Default TOLLGATE_USAGE.
	Stream string
	// Budgets compares the spend totals of the KV bucket tollgate_spend.
	Budgets bool
	// ClickHouse, when set, is a connection whose default database holds
	// the chstore schema (usage_events).
	ClickHouse driver.Conn
	// MockURL, when set, is the root URL of a mockllm server (a trailing
	// /v1 is ignored); its GET /ledger is read.
	MockURL string
	// Prices prices the mock's answers. Default pricing.Default().
	Prices *pricing.Table
	// HTTPClient reads the mock's ledger. Default a client with a 10s
	// timeout.
	HTTPClient *http.Client
}

// Options configure Run. Zero values take the defaults shown.
type Options struct {
	// Since and Until bound the range by event timestamp, [Since, Until);
	// zero is unbounded.
	Since, Until time.Time
	// Wait is how long Run keeps reading the sources again while they
	// differ. Default 0: one reading.
	Wait time.Duration
	// Poll is the pause between two readings while waiting. Default 250ms.
	Poll time.Duration
	// Skew is how far before Since (by stored time) the stream is read, for
	// gateway clocks running ahead of the NATS server's. Default 5m.
	Skew time.Duration
}

// Report is the outcome of a reconciliation.
type Report struct {
	// OK is true when every source given agrees with the stream.
	OK bool `json:"ok"`
	// Range is the range compared.
	Range Range `json:"range"`
	// Sources hold each source's figures, mock first, then stream,
	// clickhouse and budgets.
	Sources []Source `json:"sources"`
	// Differences are human-readable lines, one per disagreement; empty
	// when OK.
	Differences []string `json:"differences"`
	// Notes say what was not compared, and why.
	Notes []string `json:"notes,omitempty"`
	// Attempts is the number of readings made (more than one with Wait).
	Attempts int `json:"attempts"`
}

// Range is the compared range, as reported.
type Range struct {
	// Since and Until are RFC 3339 (UTC, milliseconds); empty when open.
	Since string `json:"since,omitempty"`
	Until string `json:"until,omitempty"`
	// Budgets names the spend totals compared: "total" (all time), "days
	// FIRST..LAST" (LAST empty when open), or "none".
	Budgets string `json:"budgets"`
}

// Source holds one source's figures.
type Source struct {
	// Name is mock, stream, clickhouse or budgets.
	Name string
	// Requests is the number of requests (events, rows, answers) counted.
	Requests int64
	// CostNanoUSD is their summed cost in nano-USD.
	CostNanoUSD int64
	// Extra holds the source's further figures, such as "duplicates".
	Extra map[string]int64
}

// MarshalJSON writes the source as one flat object: name, requests,
// cost_nano_usd, then the extra figures by name.
func (s Source) MarshalJSON() ([]byte, error) {
	b := []byte(`{"name":`)
	b = strconv.AppendQuote(b, s.Name)
	b = append(b, `,"requests":`...)
	b = strconv.AppendInt(b, s.Requests, 10)
	b = append(b, `,"cost_nano_usd":`...)
	b = strconv.AppendInt(b, s.CostNanoUSD, 10)
	keys := make([]string, 0, len(s.Extra))
	for k := range s.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = append(b, ',')
		b = strconv.AppendQuote(b, k)
		b = append(b, ':')
		b = strconv.AppendInt(b, s.Extra[k], 10)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Source) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*s = Source{}
	for k, v := range m {
		var err error
		switch k {
		case "name":
			err = json.Unmarshal(v, &s.Name)
		case "requests":
			err = json.Unmarshal(v, &s.Requests)
		case "cost_nano_usd":
			err = json.Unmarshal(v, &s.CostNanoUSD)
		default:
			var n int64
			if err = json.Unmarshal(v, &n); err == nil {
				if s.Extra == nil {
					s.Extra = map[string]int64{}
				}
				s.Extra[k] = n
			}
		}
		if err != nil {
			return fmt.Errorf("source field %s: %w", k, err)
		}
	}
	return nil
}

// Source returns the figures of the source named name, and whether the
// report has it.
func (r *Report) Source(name string) (Source, bool) {
	for _, s := range r.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return Source{}, false
}

// Run reads every source given and compares them, again and again while
// they differ until o.Wait has passed. It returns an error when a source
// cannot be read; a disagreement is a Report with OK false.
func Run(ctx context.Context, src Sources, o Options) (Report, error) {
	if src.JetStream == nil {
		return Report{}, ErrNoStream
	}
	if src.Prices == nil {
		src.Prices = pricing.Default()
	}
	if src.HTTPClient == nil {
		src.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.Skew <= 0 {
		o.Skew = 5 * time.Minute
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && !o.Since.Before(o.Until) {
		return Report{}, fmt.Errorf("empty range: since %s is not before until %s", stamp(o.Since), stamp(o.Until))
	}
	deadline := time.Now().Add(o.Wait)
	for attempt := 1; ; attempt++ {
		rep, err := once(ctx, &src, &o)
		if err != nil {
			return rep, err
		}
		rep.Attempts = attempt
		left := time.Until(deadline)
		if rep.OK || left <= 0 {
			return rep, nil
		}
		t := time.NewTimer(min(o.Poll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return rep, ctx.Err()
		case <-t.C:
		}
	}
}

// once reads every source one time and compares them.
func once(ctx context.Context, src *Sources, o *Options) (Report, error) {
	rng := newWindow(o.Since, o.Until)
	rep := Report{Range: Range{Since: stamp(o.Since), Until: stamp(o.Until), Budgets: rng.budgetsLabel()}}
	if !rng.wholeDays() {
		rep.Notes = append(rep.Notes, "the range does not cover whole UTC days: stream and ClickHouse compared only (budgets and mock need whole periods)")
	}
	st, err := readStream(ctx, src, o, rng)
	if err != nil {
		return rep, err
	}
	var mock *Source
	if src.MockURL != "" && rng.wholeDays() {
		m, err := readMock(ctx, src)
		if err != nil {
			return rep, err
		}
		mock = &m
		rep.Sources = append(rep.Sources, m)
	}
	rep.Sources = append(rep.Sources, st.source())
	stream := &rep.Sources[len(rep.Sources)-1]
	if mock != nil {
		rep.Differences = append(rep.Differences, compareMock(*mock, *stream)...)
	}
	if src.ClickHouse != nil {
		ch, err := readClickHouse(ctx, src.ClickHouse, rng)
		if err != nil {
			return rep, err
		}
		rep.Sources = append(rep.Sources, ch)
		rep.Differences = append(rep.Differences, compare(ch, *stream, "")...)
	}
	if src.Budgets && rng.wholeDays() {
		b, err := readBudgets(ctx, src.JetStream, rng)
		if err != nil {
			return rep, err
		}
		rep.Sources = append(rep.Sources, b)
		rep.Differences = append(rep.Differences, compareBudgets(b, *stream)...)
	}
	if rep.Differences == nil {
		rep.Differences = []string{}
	}
	rep.OK = len(rep.Differences) == 0
	return rep, nil
}

// stamp formats t for the report; "" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
