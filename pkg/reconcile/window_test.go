package reconcile

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		since, until time.Time
		whole        bool
		label        string
		in, out      []time.Time
	}{
		{"all time", time.Time{}, time.Time{}, true, "total", []time.Time{day}, nil},
		{"one day", day, day.Add(24 * time.Hour), true, "days 2026-11-30..2026-11-30",
			[]time.Time{day, day.Add(24*time.Hour - time.Millisecond)}, []time.Time{day.Add(-time.Millisecond), day.Add(24 * time.Hour)}},
		{"until a day", time.Time{}, day, true, "days ..2026-11-29", []time.Time{day.Add(-time.Hour)}, []time.Time{day}},
		{"from a day", day, time.Time{}, true, "days 2026-11-30..", []time.Time{day.AddDate(1, 0, 0)}, []time.Time{day.Add(-time.Nanosecond)}},
		{"part of a day", day.Add(time.Hour), time.Time{}, false, "none", []time.Time{day.Add(time.Hour)}, []time.Time{day}},
		{"sub-millisecond event", day, day.Add(time.Millisecond), true, "", []time.Time{day.Add(999 * time.Microsecond)}, []time.Time{day.Add(time.Millisecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.since, tt.until)
			if tt.label == "" { // not whole days after all
				tt.whole, tt.label = false, "none"
			}
			if w.wholeDays() != tt.whole || w.budgetsLabel() != tt.label {
				t.Errorf("whole %v label %q, want %v %q", w.wholeDays(), w.budgetsLabel(), tt.whole, tt.label)
			}
			for _, at := range tt.in {
				if !w.contains(at.UnixNano()) {
					t.Errorf("%s not in the window", at)
				}
			}
			for _, at := range tt.out {
				if w.contains(at.UnixNano()) {
					t.Errorf("%s in the window", at)
				}
			}
		})
	}
}

func TestSourceJSON(t *testing.T) {
	s := Source{Name: SourceStream, Requests: 3, CostNanoUSD: 42, Extra: map[string]int64{"duplicates": 0, "raw_requests": 3}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"name":"stream","requests":3,"cost_nano_usd":42,"duplicates":0,"raw_requests":3}`
	if string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
	var back Source
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Errorf("round trip %+v, %v", back, err)
	}
}

func TestCompare(t *testing.T) {
	stream := Source{Name: SourceStream, Requests: 10, CostNanoUSD: 1000}
	tests := []struct {
		name string
		got  Source
		want []string
	}{
		{"equal", Source{Name: "clickhouse", Requests: 10, CostNanoUSD: 1000}, nil},
		{"one fewer", Source{Name: "clickhouse", Requests: 9, CostNanoUSD: 900},
			[]string{"clickhouse: 9 requests, 900 nano-USD; stream: 10 requests, 1000 nano-USD (clickhouse has 1 request fewer and 100 nano-USD less)"}},
		{"cost only", Source{Name: "budgets", Requests: 10, CostNanoUSD: 1007},
			[]string{"budgets: 10 requests, 1007 nano-USD; stream: 10 requests, 1000 nano-USD (budgets has 7 nano-USD more)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compare(tt.got, stream, ""); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}
