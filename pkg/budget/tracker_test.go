package budget

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/pkg/testkit"
)

const usd = NanoPerUSD

func runTracker(t *testing.T, e *env, o TrackerOptions) *Tracker {
	t.Helper()
	tr := NewTracker(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, e.kv) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Tracker.Run = %v", err)
		}
	})
	select {
	case <-tr.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("tracker not ready")
	}
	return tr
}

func fixedClock(at time.Time) func() time.Time { return func() time.Time { return at } }

// runningClock starts at at and advances with real time.
func runningClock(at time.Time) func() time.Time {
	start := time.Now()
	return func() time.Time { return at.Add(time.Since(start)) }
}

func TestTrackerCheck(t *testing.T) {
	now := utc(2026, 12, 1, 12, 0, 0)
	limits := []Limit{
		{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 10 * usd},
		{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: 5 * usd},
		{Scope: ScopeGlobal, Period: PeriodTotal, AmountNano: 100 * usd},
	}
	alice := Scopes{Key: "k1", Subject: "alice", Team: "ml", Dept: "eng"}
	tests := []struct {
		name      string
		reserve   []Scopes // each reserves $4.50
		scopes    Scopes
		claims    []Limit
		estimate  int64
		want      *ExceededError
		headroom  int64
		unlimited bool
	}{
		{name: "fits", scopes: alice, estimate: usd, headroom: 5 * usd},
		{name: "exactly at the limit fits", scopes: alice, reserve: []Scopes{{Team: "ml"}}, estimate: usd / 2, headroom: usd / 2},
		{name: "team star limit", scopes: alice, reserve: []Scopes{{Team: "ml"}}, estimate: usd,
			want: &ExceededError{Scope: ScopeTeam, Value: "ml", Period: PeriodDay, PeriodStart: "2026-12-01", LimitNano: 5 * usd, ReservedNano: 4_500_000_000, EstimateNano: usd}, headroom: usd / 2},
		{name: "other team unaffected", scopes: Scopes{Team: "web", Dept: "eng"}, reserve: []Scopes{{Team: "ml"}}, estimate: usd, headroom: 5 * usd},
		{name: "dept month sums reservations", scopes: alice, reserve: []Scopes{{Dept: "eng", Team: "a"}, {Dept: "eng", Team: "b"}}, estimate: 2 * usd,
			want: &ExceededError{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, PeriodStart: "2026-12", LimitNano: 10 * usd, ReservedNano: 9 * usd, EstimateNano: 2 * usd}, headroom: usd},
		{name: "no dept, no dept limit", scopes: Scopes{Key: "k9"}, reserve: []Scopes{{Dept: "eng"}, {Dept: "eng"}, {Dept: "eng"}}, estimate: 50 * usd, headroom: 100*usd - 13_500_000_000},
		{name: "global", scopes: Scopes{}, estimate: 101 * usd,
			want: &ExceededError{Scope: ScopeGlobal, Period: PeriodTotal, LimitNano: 100 * usd, EstimateNano: 101 * usd}, headroom: 100 * usd},
		{name: "claim on own key", scopes: alice, estimate: usd + 1,
			claims: []Limit{{Scope: ScopeKey, Value: Star, Period: PeriodDay, AmountNano: usd}},
			want:   &ExceededError{Scope: ScopeKey, Value: "k1", Period: PeriodDay, PeriodStart: "2026-12-01", LimitNano: usd, EstimateNano: usd + 1}, headroom: usd},
		{name: "claim on another value does not apply", scopes: alice, estimate: 2 * usd,
			claims: []Limit{{Scope: ScopeProject, Value: "p9", Period: PeriodDay, AmountNano: usd}}, headroom: 5 * usd},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(TrackerOptions{Limits: limits, Now: fixedClock(now)})
			for _, s := range tt.reserve {
				tr.Bind(s).Reserve(4_500_000_000)
			}
			err := tr.Check(tt.scopes, tt.claims, tt.estimate)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
			} else {
				var got *ExceededError
				if !errors.As(err, &got) || !errors.Is(err, ErrOverBudget) {
					t.Fatalf("Check = %v, want %+v", err, tt.want)
				}
				if *got != *tt.want {
					t.Fatalf("Check = %+v, want %+v", *got, *tt.want)
				}
			}
			h, limited := tr.Bind(tt.scopes).Headroom(tt.claims)
			if h != tt.headroom || !limited {
				t.Fatalf("Headroom = %d, %v; want %d, true", h, limited, tt.headroom)
			}
		})
	}
}

// TestTrackerHierarchy: a team limit names its department, so team ml of
// research and team ml of finance are two totals under two limits.
func TestTrackerHierarchy(t *testing.T) {
	now := utc(2026, 12, 1, 12, 0, 0)
	research := NewScopes("k1", "alice", "research", "ml", "p1")
	finance := NewScopes("k2", "bob", "finance", "ml", "p1")
	nodept := NewScopes("k3", "carol", "", "ml", "")
	tests := []struct {
		name    string
		limit   Limit
		scopes  Scopes
		refused string // the value refused, "" when admitted
	}{
		{name: "research/ml refuses research's ml", limit: Limit{Scope: ScopeTeam, Value: "research/ml"}, scopes: research, refused: "research/ml"},
		{name: "research/ml admits finance's ml", limit: Limit{Scope: ScopeTeam, Value: "research/ml"}, scopes: finance},
		{name: "research/ml admits ml without a dept", limit: Limit{Scope: ScopeTeam, Value: "research/ml"}, scopes: nodept},
		{name: "*/ml refuses research's ml", limit: Limit{Scope: ScopeTeam, Value: "*/ml"}, scopes: research, refused: "research/ml"},
		{name: "*/ml admits finance's ml (its own total)", limit: Limit{Scope: ScopeTeam, Value: "*/ml"}, scopes: finance},
		{name: "*/web admits research's ml", limit: Limit{Scope: ScopeTeam, Value: "*/web"}, scopes: research},
		{name: "* refuses research's ml", limit: Limit{Scope: ScopeTeam, Value: Star}, scopes: research, refused: "research/ml"},
		{name: "* admits finance's ml", limit: Limit{Scope: ScopeTeam, Value: Star}, scopes: finance},
		{name: "project research/p1", limit: Limit{Scope: ScopeProject, Value: "research/p1"}, scopes: research, refused: "research/p1"},
		{name: "project finance/p1 admits research's p1", limit: Limit{Scope: ScopeProject, Value: "finance/p1"}, scopes: research},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.limit
			l.Period, l.AmountNano = PeriodDay, 5*usd
			tr := NewTracker(TrackerOptions{Limits: []Limit{l}, Now: fixedClock(now)})
			tr.Bind(research).Reserve(4_500_000_000) // research's ml has 0.50 USD left
			err := tr.Check(tt.scopes, nil, usd)
			var ex *ExceededError
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("Check = %v, want admitted", err)
			case tt.refused != "" && !errors.As(err, &ex):
				t.Fatalf("Check = %v, want refused on %s", err, tt.refused)
			case tt.refused != "" && (ex.Value != tt.refused || ex.ReservedNano != 4_500_000_000 || ex.SpendNano != 0 || ex.EstimateNano != usd):
				t.Fatalf("refused on %+v, want %s with 4.5 USD reserved, nothing spent, 1 USD estimate", ex, tt.refused)
			}
			// The same limit from a token claim decides the same way.
			tr = NewTracker(TrackerOptions{Now: fixedClock(now)})
			tr.Bind(research).Reserve(4_500_000_000)
			if err := tr.Check(tt.scopes, []Limit{l}, usd); (err != nil) != (tt.refused != "") {
				t.Fatalf("as a claim: Check = %v, want refused %v", err, tt.refused != "")
			}
		})
	}
}

func TestReservationLifecycle(t *testing.T) {
	now := utc(2026, 12, 1, 12, 0, 0)
	tr := NewTracker(TrackerOptions{Now: fixedClock(now)})
	s := Scopes{Key: "k1", Dept: "eng"}
	dept := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal}
	r := tr.Bind(s).Reserve(100)
	r2 := tr.Bind(Scopes{Dept: "eng"}).Reserve(50)
	steps := []struct {
		name               string
		do                 func()
		wantSlot, wantDept int64
	}{
		{name: "reserved", do: func() {}, wantSlot: 150, wantDept: 150},
		{name: "settled to actual", do: func() { r.Settle(30) }, wantSlot: 80, wantDept: 80},
		{name: "released", do: func() { r.Release() }, wantSlot: 50, wantDept: 50},
		{name: "release is idempotent", do: func() { r.Release() }, wantSlot: 50, wantDept: 50},
		{name: "settle after release changes nothing", do: func() { r.Settle(999) }, wantSlot: 50, wantDept: 50},
		{name: "other released", do: func() { r2.Release() }, wantSlot: 0, wantDept: 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			if _, res, _ := tr.Spend(dept); res != st.wantSlot {
				t.Errorf("reserved on dept total = %d, want %d", res, st.wantSlot)
			}
			if got := tr.Reserved(ScopeDept); got != st.wantDept {
				t.Errorf("Reserved(dept) = %d, want %d", got, st.wantDept)
			}
		})
	}
}

func TestTrackerPropagation(t *testing.T) {
	tests := []struct {
		name string
		// eventAt is the usage event's timestamp; the tracker's clock is fixed at noon.
		eventAt time.Time
	}{
		{name: "same day", eventAt: utc(2026, 12, 1, 12, 0, 1)},
		{name: "event lands on the next day (released after grace)", eventAt: utc(2026, 12, 2, 0, 0, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t)
			run(t, newConsumer(t, e.js, ConsumerOptions{}))
			limits := []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: 10 * usd}}
			tr := runTracker(t, e, TrackerOptions{Limits: limits, Now: runningClock(utc(2026, 12, 1, 12, 0, 0)), Grace: 200 * time.Millisecond})
			s := Scopes{Key: "k1", Subject: "alice", Team: "ml", Dept: "eng"}
			dept := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal}
			day := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodDay, Start: periodStart(PeriodDay, utc(2026, 12, 1, 0, 0, 0).UnixNano())}

			r := tr.Bind(s).Reserve(6 * usd)
			if err := tr.Check(s, nil, 5*usd); !errors.Is(err, ErrOverBudget) {
				t.Fatalf("Check with $6 reserved and $5 more = %v, want over budget", err)
			}
			r.Settle(4 * usd)
			seq := e.publish(t, ev{at: tt.eventAt, key: "k1", subject: "alice", team: "ml", dept: "eng", costNano: 4 * usd})
			r.Published(seq)
			testkit.Wait(t, 5*time.Second, "the condition", func() bool {
				spend, res, asOf := tr.Spend(dept)
				return spend == 4*usd && res == 0 && asOf == seq
			})
			// The day total of the reservation only empties once the event is
			// in it, or after the grace period when the event went elsewhere.
			testkit.Wait(t, 5*time.Second, "the condition", func() bool { _, res, _ := tr.Spend(day); return res == 0 })
			// Every scope's totals arrive through the watch one by one; each
			// releases its share of the reservation when it arrives.
			testkit.Wait(t, 5*time.Second, "the condition", func() bool {
				for sc := range numScopes {
					if tr.Reserved(sc) != 0 {
						return false
					}
				}
				return true
			})
			if err := tr.Check(s, nil, 6*usd); err != nil {
				t.Fatalf("Check $6 on $4 spent of $10 = %v", err)
			}
			err := tr.Check(s, nil, 6*usd+1)
			var ex *ExceededError
			if !errors.As(err, &ex) || ex.SpendNano != 4*usd || ex.ReservedNano != 0 || ex.EstimateNano != 6*usd+1 || ex.Scope != ScopeDept || ex.Value != "eng" || ex.Period != PeriodTotal {
				t.Fatalf("Check over = %v, want dept eng total with spend $4, nothing reserved, estimate $6 + 1 nano", err)
			}
		})
	}
}

func TestTrackerLoadsExistingTotals(t *testing.T) {
	e := startEnv(t)
	seq := e.publish(t, knownEvents...)
	stop := run(t, newConsumer(t, e.js, ConsumerOptions{}))
	e.waitApplied(t, seq)
	_ = stop()
	tr := runTracker(t, e, TrackerOptions{})
	for _, w := range knownWant {
		if w.absent {
			continue
		}
		id := TotalID{Scope: w.scope, Value: w.value, Period: w.period}
		if w.period != PeriodTotal {
			id.Start, _ = parseStart(w.period, w.start)
		}
		if spend, _, _ := tr.Spend(id); spend != w.cost {
			t.Errorf("%s: tracker spend %d, want %d", id.Key(), spend, w.cost)
		}
	}
}

func TestAlertsOncePerCrossing(t *testing.T) {
	e := startEnv(t)
	sub, err := e.nc.SubscribeSync(AlertSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var hooked []Alert
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var a Alert
		if err := json.Unmarshal(body, &a); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		mu.Lock()
		hooked = append(hooked, a)
		mu.Unlock()
	}))
	defer hook.Close()

	opts := ConsumerOptions{
		Limits:     []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 10 * usd}},
		WebhookURL: hook.URL,
	}
	at := utc(2026, 12, 3, 10, 0, 0)
	spend := func(n int) []ev {
		out := make([]ev, n)
		for i := range out {
			out[i] = ev{at: at, key: "k1", dept: "eng", costNano: 3 * usd}
		}
		return out
	}
	want := func(th float64, spent int64) Alert {
		return Alert{Kind: AlertThreshold, Scope: "dept", Value: "eng", Period: "month", PeriodStart: "2026-12",
			LimitNanoUSD: 10 * usd, SpendNanoUSD: spent, Threshold: th}
	}
	next := func() Alert {
		t.Helper()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no alert: %v", err)
		}
		if m.Subject != AlertSubjectPrefix+"dept" {
			t.Errorf("alert on %s", m.Subject)
		}
		var a Alert
		if err := json.Unmarshal(m.Data, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	noMore := func() {
		t.Helper()
		if m, err := sub.NextMsg(300 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("unexpected alert %s (err %v)", m.Data, err)
		}
	}

	stop := run(t, newConsumer(t, e.js, opts))
	e.waitApplied(t, e.publish(t, spend(2)...)) // $6 of $10
	if got := next(); got != want(0.5, 6*usd) {
		t.Fatalf("alert %+v, want %+v", got, want(0.5, 6*usd))
	}
	e.waitApplied(t, e.publish(t, spend(1)...)) // $9
	if got := next(); got != want(0.8, 9*usd) {
		t.Fatalf("alert %+v, want %+v", got, want(0.8, 9*usd))
	}
	noMore()
	_ = stop()

	stop = run(t, newConsumer(t, e.js, opts)) // restart: nothing re-announced
	noMore()
	e.waitApplied(t, e.publish(t, spend(1)...)) // $12
	if got := next(); got != want(1, 12*usd) {
		t.Fatalf("alert %+v, want %+v", got, want(1, 12*usd))
	}
	e.waitApplied(t, e.publish(t, spend(1)...)) // $15: nothing new crossed
	noMore()
	_ = stop()

	o := opts
	o.Durable = "budget-replay"
	run(t, newConsumer(t, e.js, o))
	e.waitConsumed(t, "budget-replay")
	noMore()

	testkit.Wait(t, 5*time.Second, "the condition", func() bool { mu.Lock(); defer mu.Unlock(); return len(hooked) == 3 })
	mu.Lock()
	defer mu.Unlock()
	for i, th := range []float64{0.5, 0.8, 1} {
		if hooked[i].Threshold != th {
			t.Errorf("webhook alert %d threshold %v, want %v", i, hooked[i].Threshold, th)
		}
	}
}

func TestAlertJumpCrossesSeveral(t *testing.T) {
	e := startEnv(t)
	sub, err := e.nc.SubscribeSync(AlertSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	run(t, newConsumer(t, e.js, ConsumerOptions{
		Limits: []Limit{{Scope: ScopeGlobal, Period: PeriodDay, AmountNano: 10 * usd}},
	}))
	e.waitApplied(t, e.publish(t, ev{at: utc(2026, 12, 3, 10, 0, 0), costNano: 11 * usd}))
	for _, th := range []float64{0.5, 0.8, 1} {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("alert %v: %v", th, err)
		}
		var a Alert
		if err := json.Unmarshal(m.Data, &a); err != nil {
			t.Fatal(err)
		}
		if a.Threshold != th || a.Scope != "global" || a.SpendNanoUSD != 11*usd {
			t.Errorf("alert %+v, want threshold %v of global", a, th)
		}
	}
}

// TestAlertAnyDeptLimit: a "*/ml" limit alerts for the ml team of the
// department that reached it, by its qualified value, and not for another
// department's ml below it.
func TestAlertAnyDeptLimit(t *testing.T) {
	e := startEnv(t)
	sub, err := e.nc.SubscribeSync(AlertSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	run(t, newConsumer(t, e.js, ConsumerOptions{
		Limits:     []Limit{{Scope: ScopeTeam, Value: "*/ml", Period: PeriodDay, AmountNano: 10 * usd}},
		Thresholds: []float64{1},
	}))
	at := utc(2026, 12, 3, 10, 0, 0)
	e.waitApplied(t, e.publish(t,
		ev{at: at, dept: "finance", team: "ml", costNano: 9 * usd},
		ev{at: at, dept: "research", team: "ml", costNano: 10 * usd}))
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no alert: %v", err)
	}
	var a Alert
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatal(err)
	}
	if a.Scope != "team" || a.Value != "research/ml" || a.SpendNanoUSD != 10*usd {
		t.Fatalf("alert %+v, want team research/ml at 10 USD", a)
	}
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("second alert %s", m.Data)
	}
}

// TestTrackerSweepsAsTotalsArrive: while requests flow, each reservation
// goes when the totals covering its event arrive, not at a timed sweep; the
// watch loop's timer only looks for grace and lost acks, once a second. A
// loop sweeping on a 50 ms tick would have swept about 8 times here.
func TestTrackerSweepsAsTotalsArrive(t *testing.T) {
	e := startEnv(t)
	run(t, newConsumer(t, e.js, ConsumerOptions{}))
	tr := runTracker(t, e, TrackerOptions{})
	s := NewScopes("k1", "alice", "eng", "ml", "")
	dept := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal}
	sweeps := tr.timedSweeps.Load()
	var last uint64
	n := 0
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		r := tr.Bind(s).Reserve(usd)
		r.Settle(usd / 2)
		last = e.publish(t, ev{at: time.Now(), key: "k1", subject: "alice", team: "ml", dept: "eng", costNano: usd / 2})
		r.Published(last)
		n++
	}
	// The consumer folds the last event within a fold interval; the totals
	// release every reservation as they arrive, before the loop's timer
	// could.
	var swept uint64
	testkit.Wait(t, 5*time.Second, "the condition", func() bool {
		swept = tr.timedSweeps.Load() - sweeps
		if spend, _, asOf := tr.Spend(dept); spend != int64(n)*usd/2 || asOf != last {
			return false
		}
		for sc := range numScopes {
			if tr.Reserved(sc) != 0 {
				return false
			}
		}
		return true
	})
	if swept > 1 {
		t.Errorf("the watch loop's timer swept %d times in 400 ms of requests, want at most 1", swept)
	}
}
