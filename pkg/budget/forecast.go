package budget

import (
	"encoding/json"
	"math/bits"
	"time"
)

// ForecastWindowDays is the trailing window of the spend rate: today so far
// and the 6 UTC days before it.
const ForecastWindowDays = 7

// minRateWindow is the shortest window a rate is taken over, so that the
// first minutes of a new scope's first day do not project a whole day from
// one request.
const minRateWindow = time.Hour

// DayTotal is one UTC day's applied spend of a scope value: the day total
// (period day) as stored in the spend bucket.
type DayTotal struct {
	// Day is the day's Start: days since 1970-01-01 (TotalID.Start).
	Day int32
	// SpendNano is the day's spend, nano-USD.
	SpendNano int64
}

// Forecast projects a limit's spend at the rate of the trailing window.
//
// Method (issue #15): the rate is the sum of the scope value's day totals
// from the start of the window to now, divided by the time elapsed since
// that start. The window starts ForecastWindowDays-1 days before today's
// midnight (UTC), or at the first day with a total when that is later (a
// scope new this week is not diluted by days before it existed), and is at
// least an hour long. Spend at period end is the spend so far plus the rate
// over the time left; the limit is exhausted when the spend so far plus the
// rate since now reaches it. Days without a total count as no spend.
type Forecast struct {
	// RateNanoPerHour is the spend rate, nano-USD per hour (rounded down).
	RateNanoPerHour int64 `json:"rate_nano_usd_per_hour"`
	// ProjectedNano is the spend projected at the period's end, nano-USD;
	// 0 for a total limit (its period does not end).
	ProjectedNano int64 `json:"projected_nano_usd"`
	// ExhaustsAt is when the spend reaches the limit at that rate: now when
	// it already has, zero when it does not before the period ends (for a
	// total limit: within a year).
	ExhaustsAt time.Time `json:"-"`
	// Crosses is true when the spend projected at the period's end is over
	// the limit while the spend so far is not: what the forecast alert
	// announces. Always false for a total limit.
	Crosses bool `json:"crosses"`
}

// MarshalJSON writes ExhaustsAt as RFC 3339 in UTC, omitted when zero.
func (f Forecast) MarshalJSON() ([]byte, error) {
	var at string
	if !f.ExhaustsAt.IsZero() {
		at = f.ExhaustsAt.UTC().Format(time.RFC3339)
	}
	return json.Marshal(struct {
		RateNanoPerHour int64  `json:"rate_nano_usd_per_hour"`
		ProjectedNano   int64  `json:"projected_nano_usd"`
		ExhaustsAt      string `json:"exhausts_at,omitempty"`
		Crosses         bool   `json:"crosses"`
	}{f.RateNanoPerHour, f.ProjectedNano, at, f.Crosses})
}

// Project forecasts a limit of limitNano whose period has spent spentNano
// so far and ends at end (zero for a total limit), at now, from the scope
// value's day totals (any order; days outside the window are ignored,
// today's included when known). It is a pure function.
func Project(limitNano, spentNano int64, end, now time.Time, days []DayTotal) Forecast {
	today := int32(now.Unix() / 86400)
	first := today - (ForecastWindowDays - 1)
	oldest, sum := today, int64(0)
	for _, d := range days {
		if d.Day < first || d.Day > today || d.SpendNano <= 0 {
			continue
		}
		oldest = min(oldest, d.Day)
		sum += d.SpendNano
	}
	elapsed := now.Sub(time.Unix(int64(oldest)*86400, 0))
	elapsed = max(elapsed, minRateWindow)
	var f Forecast
	f.RateNanoPerHour = mulDiv(sum, int64(time.Hour), int64(elapsed))
	if spentNano >= limitNano {
		f.ExhaustsAt = now
	}
	if !end.IsZero() {
		left := max(end.Sub(now), 0)
		f.ProjectedNano = satAdd(spentNano, mulDiv(sum, int64(left), int64(elapsed)))
		f.Crosses = spentNano < limitNano && f.ProjectedNano > limitNano
	}
	if spentNano < limitNano && sum > 0 {
		in := mulDiv(limitNano-spentNano, int64(elapsed), sum) // nanoseconds
		if in < int64(365*24*time.Hour) && (end.IsZero() || in <= int64(end.Sub(now))) {
			f.ExhaustsAt = now.Add(time.Duration(in))
		}
	}
	return f
}

// PeriodEnd returns the instant the total's period ends (UTC midnight after
// a day, the first of the next month), or the zero time for PeriodTotal.
func (id TotalID) PeriodEnd() time.Time {
	switch id.Period {
	case PeriodDay:
		return time.Unix((int64(id.Start)+1)*86400, 0).UTC()
	case PeriodMonth:
		y, m := int(id.Start/12), time.Month(id.Start%12+1)
		return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// mulDiv returns a*b/c rounded down for non-negative a, b and positive c,
// or MaxInt64 when the quotient does not fit.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

// SpikeOf reports a spend anomaly: the hour's spend is over factor times
// the baseline hourly rate (a Forecast's RateNanoPerHour over the trailing
// window). A zero baseline (no history) or a factor <= 1 reports nothing.
func SpikeOf(hourNano, baselineNanoPerHour int64, factor float64) bool {
	if baselineNanoPerHour <= 0 || factor <= 1 {
		return false
	}
	return float64(hourNano) > factor*float64(baselineNanoPerHour)
}
