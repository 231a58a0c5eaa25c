package chstore

import (
	"context"
	"reflect"
	"testing"
	"time"
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
