package budget

import (
	"testing"
	"time"
)

// dayOf is the DayTotal.Day of a UTC date in December 2026.
func dayOf(d int) int32 { return int32(utc(2026, 12, d, 0, 0, 0).Unix() / 86400) }

// week is six full days of 24 USD (Dec 4-9) and 12 USD today (Dec 10) by
// noon: 156 USD in 156 hours, 1 USD an hour.
func week() []DayTotal {
	var days []DayTotal
	for d := 4; d <= 9; d++ {
		days = append(days, DayTotal{Day: dayOf(d), SpendNano: 24 * usd})
	}
	return append(days, DayTotal{Day: dayOf(10), SpendNano: 12 * usd})
}

// TestProject checks the forecast against synthetic histories whose
// answers are worked out by hand in each row.
func TestProject(t *testing.T) {
	noon := utc(2026, 12, 10, 12, 0, 0)
	monthEnd := utc(2027, 1, 1, 0, 0, 0) // 21.5 days = 516 h after noon
	dayEnd := utc(2026, 12, 11, 0, 0, 0) // 12 h after noon
	tests := []struct {
		name         string
		limit, spent int64
		end, now     time.Time
		days         []DayTotal
		want         Forecast
	}{
		{
			name: "month within the limit: 300 + 516 h x 1 USD", limit: 1000 * usd, spent: 300 * usd, end: monthEnd, now: noon, days: week(),
			want: Forecast{RateNanoPerHour: usd, ProjectedNano: 816 * usd},
		},
		{
			name: "month crossing: 600 USD left 300 h from now", limit: 600 * usd, spent: 300 * usd, end: monthEnd, now: noon, days: week(),
			want: Forecast{RateNanoPerHour: usd, ProjectedNano: 816 * usd, ExhaustsAt: utc(2026, 12, 23, 0, 0, 0), Crosses: true},
		},
		{
			name: "day: 12 spent, 12 h at 1 USD reaches a 20 USD limit at 20:00", limit: 20 * usd, spent: 12 * usd, end: dayEnd, now: noon, days: week(),
			want: Forecast{RateNanoPerHour: usd, ProjectedNano: 24 * usd, ExhaustsAt: utc(2026, 12, 10, 20, 0, 0), Crosses: true},
		},
		{
			name: "days outside the window are ignored", limit: 1000 * usd, spent: 300 * usd, end: monthEnd, now: noon,
			days: append(week(), DayTotal{Day: dayOf(3), SpendNano: 500 * usd}, DayTotal{Day: dayOf(11), SpendNano: 500 * usd}),
			want: Forecast{RateNanoPerHour: usd, ProjectedNano: 816 * usd},
		},
		{
			name: "new scope: the window starts at its first day (36 USD in 36 h)", limit: 100 * usd, spent: 36 * usd, end: monthEnd, now: noon,
			days: []DayTotal{{Day: dayOf(9), SpendNano: 24 * usd}, {Day: dayOf(10), SpendNano: 12 * usd}},
			want: Forecast{RateNanoPerHour: usd, ProjectedNano: 552 * usd, ExhaustsAt: utc(2026, 12, 13, 4, 0, 0), Crosses: true},
		},
		{
			name: "first minutes: at least an hour (3 USD by 00:10 is 3 USD/h)", limit: 1000 * usd, spent: 3 * usd, end: dayEnd, now: utc(2026, 12, 10, 0, 10, 0),
			days: []DayTotal{{Day: dayOf(10), SpendNano: 3 * usd}},
			want: Forecast{RateNanoPerHour: 3 * usd, ProjectedNano: 3*usd + 3*usd*(23*60+50)/60},
		},
		{
			name: "no history: rate 0, projection = spend", limit: 10 * usd, spent: usd, end: monthEnd, now: noon,
			want: Forecast{ProjectedNano: usd},
		},
		{
			name: "already over: exhausted now, not a crossing", limit: 5 * usd, spent: 6 * usd, end: monthEnd, now: noon, days: week(),
			want: Forecast{RateNanoPerHour: usd, ProjectedNano: 522 * usd, ExhaustsAt: noon},
		},
		{
			name: "total limit: rate and exhaustion, no period end", limit: 1000 * usd, spent: 400 * usd, now: noon, days: week(),
			want: Forecast{RateNanoPerHour: usd, ExhaustsAt: noon.Add(600 * time.Hour)},
		},
		{
			name: "total limit exhausted beyond a year: not projected", limit: 1_000_000 * usd, spent: 0, now: noon, days: week(),
			want: Forecast{RateNanoPerHour: usd},
		},
		{
			name: "uneven rate rounds down: 1 nano-USD over 3 h", limit: usd, spent: 0, end: dayEnd, now: utc(2026, 12, 10, 3, 0, 0),
			days: []DayTotal{{Day: dayOf(10), SpendNano: 1}},
			want: Forecast{RateNanoPerHour: 0, ProjectedNano: 7},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Project(tt.limit, tt.spent, tt.end, tt.now, tt.days)
			if got != tt.want {
				t.Errorf("Project =\n %+v, want\n %+v", got, tt.want)
			}
		})
	}
}

func TestPeriodEnd(t *testing.T) {
	tests := []struct {
		id   TotalID
		want time.Time
	}{
		{TotalID{Period: PeriodDay, Start: dayOf(31)}, utc(2027, 1, 1, 0, 0, 0)},
		{TotalID{Period: PeriodMonth, Start: 2026*12 + 11}, utc(2027, 1, 1, 0, 0, 0)},
		{TotalID{Period: PeriodMonth, Start: 2026*12 + 1}, utc(2026, 3, 1, 0, 0, 0)},
		{TotalID{Period: PeriodTotal}, time.Time{}},
	}
	for _, tt := range tests {
		if got := tt.id.PeriodEnd(); !got.Equal(tt.want) {
			t.Errorf("%+v ends %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestSpikeOf(t *testing.T) {
	tests := []struct {
		name       string
		hour, base int64
		factor     float64
		want       bool
	}{
		{"three times the baseline at factor 3 is not over", 3 * usd, usd, 3, false},
		{"just over", 3*usd + 1, usd, 3, true},
		{"no baseline", 100 * usd, 0, 3, false},
		{"factor 1 or less is off", 2 * usd, usd, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SpikeOf(tt.hour, tt.base, tt.factor); got != tt.want {
				t.Errorf("SpikeOf(%d, %d, %v) = %v", tt.hour, tt.base, tt.factor, got)
			}
		})
	}
}
