package budget

import (
	"context"
	"errors"
	"testing"
)

func TestCheckReserved(t *testing.T) {
	now := utc(2026, 11, 30, 12, 0, 0)
	limits := []Limit{
		{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 10 * usd},
		{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: 5 * usd},
	}
	alice := Scopes{Key: "k1", Subject: "alice", Team: "ml", Dept: "eng"}
	claim := []Limit{{Scope: ScopeSubject, Value: Star, Period: PeriodTotal, AmountNano: 2 * usd}}
	tests := []struct {
		name    string
		other   int64 // reserved by another request of alice first
		own     int64
		claims  []Limit
		size    int // capacity of dst
		want    []Checked
		refused *ExceededError
	}{
		{
			name: "admitted", other: 3 * usd, own: usd, size: 8,
			want: []Checked{
				{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, PeriodStart: "2026-11", LimitNano: 10 * usd, SpentNano: 3 * usd},
				{Scope: ScopeTeam, Value: "ml", Period: PeriodDay, PeriodStart: "2026-11-30", LimitNano: 5 * usd, SpentNano: 3 * usd},
			},
		},
		{
			name: "token limit", other: usd / 2, own: usd, claims: claim, size: 8,
			want: []Checked{
				{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, PeriodStart: "2026-11", LimitNano: 10 * usd, SpentNano: usd / 2},
				{Scope: ScopeTeam, Value: "ml", Period: PeriodDay, PeriodStart: "2026-11-30", LimitNano: 5 * usd, SpentNano: usd / 2},
				{Scope: ScopeSubject, Value: "alice", Period: PeriodTotal, FromToken: true, LimitNano: 2 * usd, SpentNano: usd / 2},
			},
		},
		{
			name: "refused by the team, every limit still listed", other: 4 * usd, own: 2 * usd, size: 8,
			want: []Checked{
				{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, PeriodStart: "2026-11", LimitNano: 10 * usd, SpentNano: 4 * usd},
				{Scope: ScopeTeam, Value: "ml", Period: PeriodDay, PeriodStart: "2026-11-30", LimitNano: 5 * usd, SpentNano: 4 * usd},
			},
			refused: &ExceededError{Scope: ScopeTeam, Value: "ml", Period: PeriodDay, PeriodStart: "2026-11-30", LimitNano: 5 * usd, ReservedNano: 4 * usd, EstimateNano: 2 * usd},
		},
		{
			name: "full: the refusing limit replaces the last", other: 3 * usd, own: usd, claims: claim, size: 2,
			want: []Checked{
				{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, PeriodStart: "2026-11", LimitNano: 10 * usd, SpentNano: 3 * usd},
				{Scope: ScopeSubject, Value: "alice", Period: PeriodTotal, FromToken: true, LimitNano: 2 * usd, SpentNano: 3 * usd},
			},
			refused: &ExceededError{Scope: ScopeSubject, Value: "alice", Period: PeriodTotal, LimitNano: 2 * usd, ReservedNano: 3 * usd, EstimateNano: usd},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(TrackerOptions{Limits: limits, Now: fixedClock(now)})
			tr.Bind(alice).Reserve(tt.other)
			tr.Bind(alice).Reserve(tt.own)
			got, _, err := tr.Bind(alice).CheckReserved(context.Background(), tt.claims, tt.own, make([]Checked, 0, tt.size))
			if len(got) != len(tt.want) {
				t.Fatalf("got %d checks %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("check %d = %+v, want %+v", i, got[i], tt.want[i])
				}
				if h := got[i].HeadroomNano(); h != tt.want[i].LimitNano-tt.want[i].SpentNano {
					t.Errorf("check %d headroom %d", i, h)
				}
			}
			var ex *ExceededError
			switch {
			case tt.refused == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refused != nil && !errors.As(err, &ex):
				t.Fatalf("err = %v, want %v", err, tt.refused)
			case tt.refused != nil && *ex != *tt.refused:
				t.Errorf("err = %+v, want %+v", *ex, *tt.refused)
			}
		})
	}
}

// TestCheckReservedAllocs: recording the checks allocates nothing when the
// request is admitted (the period names are formatted once per period).
func TestCheckReservedAllocs(t *testing.T) {
	tr := NewTracker(TrackerOptions{Limits: []Limit{
		{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 10 * usd},
		{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: 5 * usd},
	}})
	s := Scopes{Team: "ml", Dept: "eng"}
	dst := make([]Checked, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := tr.Bind(s).CheckReserved(context.Background(), nil, 0, dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocs per check, want 0", allocs)
	}
}
