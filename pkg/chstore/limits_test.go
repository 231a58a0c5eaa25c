package chstore

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chtest"
)

// TestWriteLimits writes successive configs and checks that
// budget_limits_current holds exactly the last one: changed amounts,
// removed and added limits, an unchanged rewrite, an empty config, and a
// clock that went back.
func TestWriteLimits(t *testing.T) {
	s := newStore(t, ch.Addr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	eng := Limit{Scope: "dept", Value: "eng", Period: "month", AmountNano: 10e9}
	star := Limit{Scope: "dept", Value: "*", Period: "month", AmountNano: 2e9}
	ml := Limit{Scope: "team", Value: "research/ml", Period: "day", AmountNano: 500_000_000}
	global := Limit{Scope: "global", Value: "", Period: "total", AmountNano: 1_000e9}
	eng20 := eng
	eng20.AmountNano = 20e9

	steps := []struct {
		name  string
		write []Limit
		at    time.Time
		want  []Limit // ordered by scope, value, period
		wantV uint64  // the current set's version
	}{
		{name: "first config", write: []Limit{eng, star, global}, at: t0,
			want: []Limit{star, eng, global}, wantV: uint64(t0.UnixMilli())},
		{name: "amount changed, limit added, limit removed", write: []Limit{eng20, ml, global}, at: t0.Add(time.Minute),
			want: []Limit{eng20, global, ml}, wantV: uint64(t0.Add(time.Minute).UnixMilli())},
		{name: "same config again", write: []Limit{eng20, ml, global}, at: t0.Add(2 * time.Minute),
			want: []Limit{eng20, global, ml}, wantV: uint64(t0.Add(2 * time.Minute).UnixMilli())},
		{name: "clock behind", write: []Limit{eng, ml, global}, at: t0,
			want: []Limit{eng, global, ml}, wantV: uint64(t0.Add(2*time.Minute).UnixMilli()) + 1},
		{name: "no limits configured", write: nil, at: t0.Add(3 * time.Minute),
			want: nil, wantV: uint64(t0.Add(3 * time.Minute).UnixMilli())},
		{name: "still none", write: nil, at: t0.Add(4 * time.Minute),
			want: nil, wantV: uint64(t0.Add(3 * time.Minute).UnixMilli())},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			v, err := s.WriteLimits(ctx, st.write, st.at)
			if err != nil {
				t.Fatal(err)
			}
			if v != st.wantV {
				t.Errorf("version %d, want %d", v, st.wantV)
			}
			got, err := s.Limits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, st.want) {
				t.Errorf("current limits\n got %+v\nwant %+v", got, st.want)
			}
		})
	}
}

// TestLimitWriter: of two sets handed over before Run only the newest is
// written; a set handed over while ClickHouse is down is written once it
// is back, without being handed over again; Run ends with its ctx.
func TestLimitWriter(t *testing.T) {
	srv := chtest.New(t)
	s := newStore(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eng := budget.Limit{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodMonth, AmountNano: 10e9}
	ml := budget.Limit{Scope: budget.ScopeTeam, Value: "research/ml", Period: budget.PeriodDay, AmountNano: 500_000_000}
	global := budget.Limit{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal, AmountNano: 1_000e9}

	w := NewLimitWriter(slog.New(slog.DiscardHandler))
	w.Retry = 100 * time.Millisecond
	w.SetLimits([]budget.Limit{eng})
	w.SetLimits([]budget.Limit{eng, ml})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx, s) }()
	waitLimits(ctx, t, s, BudgetLimits([]budget.Limit{eng, ml}))
	if vs := queryStrings(t, s, "SELECT toString(count(DISTINCT version)) FROM budget_limits"); !reflect.DeepEqual(vs, []string{"1"}) {
		t.Errorf("%v versions written, want 1: the replaced set is never written", vs)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	w.SetLimits([]budget.Limit{global})
	time.Sleep(300 * time.Millisecond) // a write or two fails
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitLimits(ctx, t, s, BudgetLimits([]budget.Limit{global}))

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not end with its ctx")
	}
}

// waitLimits waits until budget_limits_current holds want (ordered by
// scope, value, period).
func waitLimits(ctx context.Context, t *testing.T, s *Store, want []Limit) {
	t.Helper()
	for {
		got, err := s.Limits(ctx)
		if err == nil && reflect.DeepEqual(got, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("current limits %+v (%v), want %+v", got, err, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
