package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/replay"
)

// setupReplay is `tollctl replay`: re-read a range of the usage stream into
// ClickHouse, the spend totals, or NDJSON.
func setupReplay(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	var cf chFlags
	nf.register(a, fs)
	cf.register(a, fs)
	to := fs.String("to", "ndjson", "clickhouse, budgets or ndjson")
	since := fs.String("since", "", "start of the range: RFC 3339 time, YYYY-MM-DD, or a duration ago (30d, 12h)")
	until := fs.String("until", "", "end of the range (exclusive), same forms as --since")
	fromSeq := fs.Uint64("from-seq", 0, "first stream sequence")
	toSeq := fs.Uint64("to-seq", 0, "last stream sequence")
	reprice := fs.String("reprice", "", "price file (pkg/pricing format) to recompute costs with")
	out := fs.String("out", "-", "ndjson output file, - for stdout")
	period := fs.String("period", "", "budgets: the period to recompute, month:YYYY-MM or day:YYYY-MM-DD")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		o := replay.Options{FromSeq: *fromSeq, ToSeq: *toSeq}
		var err error
		if o.Since, err = parseWhen(*since, a.now()); err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
		if o.Until, err = parseWhen(*until, a.now()); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
		if *reprice != "" {
			b, err := os.ReadFile(*reprice)
			if err != nil {
				return err
			}
			if o.Reprice, err = pricing.Parse(b); err != nil {
				return fmt.Errorf("parse %s: %w", *reprice, err)
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		nc, js, err := nf.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		var sink replay.Sink
		var report func() string
		switch *to {
		case "ndjson":
			w := a.stdout
			if *out != "-" {
				f, err := os.Create(*out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			sink = replay.NewNDJSON(w)
			report = func() string { return "" }
		case "clickhouse":
			st, err := cf.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.Migrate(ctx); err != nil {
				return err
			}
			s := replay.NewClickHouse(st.Conn(), o.Reprice != nil)
			sink = s
			report = func() string { return fmt.Sprintf(", %d rows inserted, %d already stored", s.Inserted, s.Skipped) }
		case "budgets":
			p, at, err := parsePeriod(*period)
			if err != nil {
				return fmt.Errorf("%w: --period: %v", errUsage, err)
			}
			if o.Since.IsZero() && o.FromSeq == 0 {
				start, _ := replay.PeriodBounds(p, at)
				o.Since = start.Add(-time.Hour) // late publishes of the period's first events
			}
			if !o.Until.IsZero() || o.ToSeq != 0 {
				return fmt.Errorf("%w: budgets replay reads to the stream's end; drop --until/--to-seq", errUsage)
			}
			kv, err := budget.EnsureBucket(ctx, js, 0)
			if err != nil {
				return err
			}
			s, err := replay.NewBudgets(kv, p, at)
			if err != nil {
				return err
			}
			sink = s
			report = func() string { return fmt.Sprintf(", %d totals written", s.Written) }
		default:
			return fmt.Errorf("%w: --to %q: want clickhouse, budgets or ndjson", errUsage, *to)
		}
		pr := newProgress(a.stderr)
		o.Progress = pr.update
		st, err := replay.Run(ctx, js, o, sink)
		pr.finish()
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "replayed %d events (seq %d..%d), %d undecodable, %d repriced, %d without a price%s\n",
			st.Events, st.FirstSeq, st.LastSeq, st.Undecodable, st.Repriced, st.Unpriced, report())
		return nil
	}
}

// parseWhen reads a time: RFC 3339, YYYY-MM-DD (UTC), or a duration before
// now ("30d", "12h", "90m"). Empty is the zero time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err == nil && days >= 0 {
			return now.AddDate(0, 0, -days), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339, YYYY-MM-DD or a duration like 30d", s)
	}
	return now.Add(-d), nil
}

// parsePeriod reads month:YYYY-MM or day:YYYY-MM-DD.
func parsePeriod(s string) (budget.Period, time.Time, error) {
	kind, v, _ := strings.Cut(s, ":")
	switch kind {
	case "month":
		t, err := time.Parse("2006-01", v)
		return budget.PeriodMonth, t, err
	case "day":
		t, err := time.Parse(time.DateOnly, v)
		return budget.PeriodDay, t, err
	}
	return 0, time.Time{}, fmt.Errorf("%q: want month:YYYY-MM or day:YYYY-MM-DD", s)
}

// progress draws a bar with rate and ETA on a terminal, or a plain line
// every few seconds otherwise.
type progress struct {
	w        io.Writer
	tty      bool
	last     time.Time
	lastLine string
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(r replay.Progress) {
	now := time.Now()
	if !p.tty && now.Sub(p.last) < 2*time.Second && r.Done != r.Total {
		return
	}
	p.last = now
	p.lastLine = progressLine(r, p.tty)
	if p.tty {
		fmt.Fprint(p.w, "\r"+p.lastLine)
		return
	}
	fmt.Fprintln(p.w, p.lastLine)
}

func (p *progress) finish() {
	if p.tty && p.lastLine != "" {
		fmt.Fprintln(p.w)
	}
}

// progressLine renders r: "[#####-----] 50.0% 500/1000 1200 ev/s ETA 0s".
func progressLine(r replay.Progress, bar bool) string {
	frac := 0.0
	if r.Total > 0 {
		frac = float64(r.Done) / float64(r.Total)
	}
	rate := 0.0
	if s := r.Elapsed.Seconds(); s > 0 {
		rate = float64(r.Done) / s
	}
	eta := "?"
	if rate > 0 {
		eta = (time.Duration(float64(r.Total-r.Done)/rate) * time.Second).Round(time.Second).String()
	}
	line := fmt.Sprintf("%5.1f%% %d/%d %.0f ev/s ETA %s", 100*frac, r.Done, r.Total, rate, eta)
	if !bar {
		return "replay " + line
	}
	const width = 30
	n := int(frac * width)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "] " + line
}
