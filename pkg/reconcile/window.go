package reconcile

import (
	"math"
	"time"
)

const msPerDay = int64(24 * time.Hour / time.Millisecond)

// window is a range of event times in Unix milliseconds, [lo, hi).
type window struct {
	lo, hi         int64 // math.MinInt64 / math.MaxInt64 when open
	openLo, openHi bool
}

func newWindow(since, until time.Time) window {
	w := window{lo: math.MinInt64, hi: math.MaxInt64, openLo: since.IsZero(), openHi: until.IsZero()}
	if !w.openLo {
		w.lo = since.UnixMilli()
	}
	if !w.openHi {
		w.hi = until.UnixMilli()
	}
	return w
}

// contains reports whether an event at ts (Unix ns) is in the window, at
// millisecond precision, as ClickHouse stores it (ts_ms).
func (w window) contains(ts int64) bool {
	ms := floorDiv(ts, int64(time.Millisecond))
	return ms >= w.lo && ms < w.hi
}

// unbounded reports whether the window is all time.
func (w window) unbounded() bool { return w.openLo && w.openHi }

// wholeDays reports whether each end is open or a UTC midnight, so the
// window is a union of whole days (or all time).
func (w window) wholeDays() bool {
	return (w.openLo || w.lo%msPerDay == 0) && (w.openHi || w.hi%msPerDay == 0)
}

// hasDay reports whether the UTC day numbered d (days since 1970-01-01) is
// in the window; only meaningful when wholeDays.
func (w window) hasDay(d int64) bool {
	start := d * msPerDay
	return (w.openLo || start >= w.lo) && (w.openHi || start < w.hi)
}

// budgetsLabel names the spend totals the window is compared with.
func (w window) budgetsLabel() string {
	switch {
	case !w.wholeDays():
		return "none"
	case w.unbounded():
		return "total"
	}
	first, last := "", ""
	if !w.openLo {
		first = time.UnixMilli(w.lo).UTC().Format(time.DateOnly)
	}
	if !w.openHi {
		last = time.UnixMilli(w.hi - msPerDay).UTC().Format(time.DateOnly)
	}
	return "days " + first + ".." + last
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
