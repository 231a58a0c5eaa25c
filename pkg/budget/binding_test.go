package budget

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The Tracker resolves a principal's totals once (binding.go); a new day
// or a config reload must still reach the right totals and limits.
func TestBindingFollowsPeriodsAndLimits(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	set := func(at time.Time) { clock.Store(&at) }
	set(utc(2026, 12, 1, 23, 59, 0))
	tr := NewTracker(TrackerOptions{Now: func() time.Time { return *clock.Load() }})
	s := NewScopes("k1", "alice", "research", "ml", "p1")
	day := func(at time.Time, sc Scope, v string) TotalID {
		return TotalID{Scope: sc, Value: v, Period: PeriodDay, Start: periodStarts(at.UnixNano())[PeriodDay]}
	}
	d1 := utc(2026, 12, 1, 0, 0, 0)
	d2 := utc(2026, 12, 2, 0, 0, 0)

	r1 := tr.Bind(s).Reserve(100)
	set(utc(2026, 12, 2, 0, 0, 1))
	r2 := tr.Bind(s).Reserve(7)
	for _, sc := range []Scope{ScopeGlobal, ScopeDept, ScopeTeam, ScopeKey} {
		v := s.Value(sc)
		if _, res, _ := tr.Spend(day(d1, sc, v)); res != 100 {
			t.Errorf("%s day 1 reserved %d, want 100", sc, res)
		}
		if _, res, _ := tr.Spend(day(d2, sc, v)); res != 7 {
			t.Errorf("%s day 2 reserved %d, want 7 (the request after midnight)", sc, res)
		}
	}
	if _, limited := tr.Bind(s).Headroom(nil); limited {
		t.Fatal("Headroom limited with no limits configured")
	}

	tr.SetLimits([]Limit{{Scope: ScopeTeam, Value: "research/ml", Period: PeriodDay, AmountNano: 50}})
	room, limited := tr.Bind(s).Headroom(nil)
	if !limited || room != 43 {
		t.Fatalf("after the reload Headroom = %d, %v; want 43 (50 - 7 reserved today), true", room, limited)
	}
	r3 := tr.Bind(s).Reserve(44)
	_, _, err := tr.Bind(s).CheckReserved(context.Background(), nil, 44, nil)
	if err == nil {
		t.Fatal("CheckReserved admitted 44 on a day limit of 50 with 7 reserved")
	}
	r3.Release()
	tr.SetLimits(nil)
	if _, limited := tr.Bind(s).Headroom(nil); limited {
		t.Fatal("Headroom still limited after the limit was removed")
	}
	r1.Release()
	r2.Release()
	for _, id := range []TotalID{day(d1, ScopeDept, "research"), day(d2, ScopeDept, "research")} {
		if _, res, _ := tr.Spend(id); res != 0 {
			t.Errorf("%v reserved %d after Release, want 0", id, res)
		}
	}
}
