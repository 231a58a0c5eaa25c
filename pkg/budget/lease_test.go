package budget

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/config"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// gw is one gateway's Tracker with leases, on its own NATS connection.
type gw struct {
	tr   *Tracker
	nc   *nats.Conn
	js   jetstream.JetStream
	lkv  jetstream.KeyValue
	stop func() // ends Run and RunLeases (RunLeases returns the slices)
	n    atomic.Int64
}

// startGateway runs a Tracker with leases o on a new connection to e.
func startGateway(t *testing.T, e *env, limits []Limit, o LeaseOptions) *gw {
	t.Helper()
	nc, err := nats.Connect(e.ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	lkv, err := EnsureLeaseBucket(ctx, js, 1, o.TTL)
	if err != nil {
		t.Fatal(err)
	}
	g := &gw{tr: NewTracker(TrackerOptions{Limits: limits, Leases: &o}), nc: nc, js: js, lkv: lkv}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.tr.Run(ctx, kv) }()
	go func() { defer wg.Done(); _ = g.tr.RunLeases(ctx, lkv) }()
	var once sync.Once
	g.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(g.stop)
	for _, ch := range []<-chan struct{}{g.tr.Ready(), g.tr.LeasesReady()} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("tracker not ready")
		}
	}
	return g
}

// request is what the gateway does for one request: reserve est, check,
// and when admitted settle actual and publish the usage event (its
// reservation released once the totals include it). It returns the
// admission error.
func (g *gw) request(t *testing.T, s Scopes, est, actual int64, upstream func()) error {
	return g.requestObserved(t, s, est, actual, upstream, nil)
}

// requestObserved is request calling admitted once the request is
// admitted.
func (g *gw) requestObserved(t *testing.T, s Scopes, est, actual int64, upstream func(), admitted func()) error {
	var dst [8]Checked
	r := g.tr.Bind(s).Reserve(est)
	if _, _, err := g.tr.Bind(s).CheckReserved(context.Background(), nil, est, dst[:0]); err != nil {
		r.Release()
		return err
	}
	if admitted != nil {
		admitted()
	}
	if upstream != nil {
		upstream()
	}
	r.Settle(actual)
	id := g.tr.leases.o.ID + "-" + itoa(int(g.n.Add(1)))
	data, err := proto.Marshal(ev{at: time.Now(), dept: s.Dept, team: s.Team, costNano: actual}.proto(id))
	if err != nil {
		t.Error(err)
		return nil
	}
	g.tr.Await(id, r)
	ack, err := g.js.Publish(context.Background(), "tollgate.usage."+s.Dept, data, jetstream.WithMsgID(id))
	if err != nil {
		t.Errorf("publish: %v", err)
		return nil
	}
	g.tr.OnAck(id, ack.Sequence)
	return nil
}

// record reads the lease entry of id.
func record(t *testing.T, kv jetstream.KeyValue, id TotalID) leaseRecord {
	t.Helper()
	var rec leaseRecord
	e, err := kv.Get(context.Background(), id.Key())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

var engTotal = TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal}

// TestLeasesHoldAcrossGateways: three gateways, 20 clients each, every
// request reserving its max_tokens cost, against one dept limit applied by
// a running budget Consumer. Total spend stays within the limit (actual <=
// reserved, so no settle excess), and most of the limit is served.
func TestLeasesHoldAcrossGateways(t *testing.T) {
	const (
		limit   = 5_000_000 // nano-USD, the chaos scenario's 0.005 USD
		est     = 20_000    // reserved per request (max_tokens)
		clients = 20        // per gateway
	)
	e := startEnv(t)
	run(t, newConsumer(t, e.newJS(t), ConsumerOptions{}))
	limits := []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: limit}}
	gws := []*gw{
		startGateway(t, e, limits, LeaseOptions{ID: "gw-a"}),
		startGateway(t, e, limits, LeaseOptions{ID: "gw-b"}),
		startGateway(t, e, limits, LeaseOptions{ID: "gw-c"}),
	}
	s := Scopes{Dept: "eng", Team: "ml"}
	var admitted, refused, served, inflight atomic.Int64
	// served spend and reservations in flight when the first refusal came, +1
	var firstServed, firstInflight atomic.Int64
	var wg sync.WaitGroup
	for _, g := range gws {
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				misses := 0
				for misses < 5 {
					actual := est/2 + rand.Int64N(est/2+1)
					err := g.requestObserved(t, s, est, actual, func() {
						time.Sleep(time.Duration(150+rand.IntN(150)) * time.Millisecond) // the upstream
						inflight.Add(-est)
						served.Add(actual)
					}, func() { inflight.Add(est) })
					if err != nil {
						if !errors.Is(err, ErrOverBudget) {
							t.Errorf("refusal %v, want ErrOverBudget", err)
						}
						if firstServed.CompareAndSwap(0, served.Load()+1) {
							firstInflight.Store(inflight.Load())
						}
						refused.Add(1)
						misses++
						time.Sleep(10 * time.Millisecond)
						continue
					}
					admitted.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	e.waitConsumed(t, Durable)
	st := e.total(t, engTotal)
	if st == nil {
		t.Fatal("no eng total")
	}
	if st.CostNanoUsd != served.Load() {
		t.Errorf("applied total %d, served %d", st.CostNanoUsd, served.Load())
	}
	if st.CostNanoUsd > limit {
		t.Errorf("spend %d over the limit %d by %d", st.CostNanoUsd, limit, st.CostNanoUsd-limit)
	}
	if st.CostNanoUsd < limit/2 {
		t.Errorf("spend %d: less than half of the limit %d served", st.CostNanoUsd, limit)
	}
	var waits, withRoom, refills, conflicts uint64
	for _, g := range gws {
		ls := g.tr.LeaseStats()
		waits, withRoom, refills, conflicts = waits+ls.Waits, withRoom+ls.RefusedWithRoom, refills+ls.Refills, conflicts+ls.Conflicts
	}
	t.Logf("spend %d of %d (%.1f%%), %d admitted, %d refused; first refusal with %.1f%% of the limit spent "+
		"and %.1f%% more reserved in flight; %d waits, %d refused by a slice, %d refills, %d CAS conflicts",
		st.CostNanoUsd, limit, 100*float64(st.CostNanoUsd)/limit, admitted.Load(), refused.Load(),
		100*float64(firstServed.Load()-1)/limit, 100*float64(firstInflight.Load())/limit, waits, withRoom, refills, conflicts)
}

// TestLeaseSingleGatewayExact: one gateway alone holds the whole remaining
// headroom, so it admits up to the limit exactly, as without leases.
func TestLeaseSingleGatewayExact(t *testing.T) {
	e := startEnv(t)
	limits := []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: 10 * usd}}
	g := startGateway(t, e, limits, LeaseOptions{ID: "solo"})
	s := Scopes{Dept: "eng"}
	var dst [8]Checked
	for i, amount := range []int64{4 * usd, 4 * usd, 2 * usd} {
		g.tr.Bind(s).Reserve(amount)
		checks, _, err := g.tr.Bind(s).CheckReserved(context.Background(), nil, amount, dst[:0])
		if err != nil {
			t.Fatalf("request %d of %d: %v", i, amount, err)
		}
		if want := 10*usd - 4*usd*int64(i); len(checks) != 1 || checks[0].HeadroomNano() != want {
			t.Errorf("request %d: checks %+v, want headroom %d", i, checks, want)
		}
	}
	if h, _ := g.tr.Bind(s).Headroom(nil); h != 0 {
		t.Errorf("headroom %d at the limit, want 0", h)
	}
	r := g.tr.Bind(s).Reserve(1)
	_, _, err := g.tr.Bind(s).CheckReserved(context.Background(), nil, 1, dst[:0])
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.LimitNano != 10*usd {
		t.Fatalf("one nano over the limit: %v, want refused", err)
	}
	r.Release()
	if rec := record(t, g.lkv, engTotal); rec.Holders["solo"].Slice != 10*usd {
		t.Errorf("lease record %+v, want solo holding the whole limit", rec)
	}
}

// TestLeaseDeadGatewayExpires: a gateway that dies holding the whole
// headroom (no return: its connection is gone) blocks the others until
// its slice's TTL passes, then they draw it.
func TestLeaseDeadGatewayExpires(t *testing.T) {
	e := startEnv(t)
	limits := []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: usd}}
	o := LeaseOptions{TTL: time.Second, RefillWait: 20 * time.Millisecond, FirstGrantWait: 20 * time.Millisecond}
	oa, ob := o, o
	oa.ID, ob.ID = "dies", "lives"
	a := startGateway(t, e, limits, oa)
	s := Scopes{Dept: "eng"}
	if err := a.request(t, s, 1000, 1000, nil); err != nil {
		t.Fatal(err)
	}
	a.nc.Close() // dead: ReturnLeases cannot write
	a.stop()
	if rec := record(t, e.kv0(t), engTotal); rec.Holders["dies"].Slice < usd-1000 {
		t.Fatalf("lease record %+v, want the dead gateway holding the rest of the limit", rec)
	}
	b := startGateway(t, e, limits, ob)
	err := b.request(t, s, 1000, 1000, nil)
	if !errors.Is(err, ErrOverBudget) {
		t.Fatalf("request while the dead gateway's slice is valid: %v, want refused", err)
	}
	// The refusal names what the dead gateway holds, not a spend.
	rec := record(t, e.kv0(t), engTotal)
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.SpendNano != 0 || ex.ReservedNano != 0 || ex.EstimateNano != 1000 ||
		ex.HeldNano != rec.Holders["dies"].Slice+rec.Floor {
		t.Errorf("refusal %+v, want spent 0, reserved 0, estimate 1000, held %d (slice + floor of %+v)", ex, rec.Holders["dies"].Slice+rec.Floor, rec)
	}
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return b.request(t, s, 1000, 1000, nil) == nil })
	if st := b.tr.LeaseStats(); st.Waits == 0 || st.RefusedWithRoom == 0 {
		t.Errorf("stats %+v: want the waits and refusals with headroom counted", st)
	}
}

// TestLeaseShutdownReturns: a gateway stopped normally gives its slice
// back, so another draws it at once, long before any TTL.
func TestLeaseShutdownReturns(t *testing.T) {
	e, limits := startApplied(t)
	a := startGateway(t, e, limits, LeaseOptions{ID: "leaves", TTL: time.Hour})
	s := Scopes{Dept: "eng"}
	if err := a.request(t, s, 1000, 1000, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return a.tr.Reserved(ScopeDept) == 0 }) // applied
	a.stop()
	if rec := record(t, e.kv0(t), engTotal); rec.Holders["leaves"].Slice != 0 || rec.Floor != 1000 {
		t.Fatalf("lease record after shutdown %+v, want no slice left and floor 1000", rec)
	}
	b := startGateway(t, e, limits, LeaseOptions{ID: "stays", TTL: time.Hour})
	if err := b.request(t, s, usd-1000, usd-1000, nil); err != nil {
		t.Fatalf("the rest of the limit after the other gateway left: %v", err)
	}
}

// startApplied starts an environment whose events a budget Consumer
// applies, and returns it with a limit of one USD on dept eng.
func startApplied(t *testing.T) (*env, []Limit) {
	e := startEnv(t)
	run(t, newConsumer(t, e.newJS(t), ConsumerOptions{}))
	return e, []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: usd}}
}

// kv0 is the leases bucket on the test's own connection.
func (e *env) kv0(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func TestLeaseOptionsFrom(t *testing.T) {
	tests := []struct {
		name    string
		cfg     config.BudgetLeases
		want    *LeaseOptions
		wantErr bool
	}{
		{name: "defaults", cfg: config.BudgetLeases{}, want: &LeaseOptions{}},
		{name: "disabled", cfg: config.BudgetLeases{Disabled: true}},
		{name: "max slice", cfg: config.BudgetLeases{MaxSliceUSD: "0.25", TTL: time.Minute},
			want: &LeaseOptions{MaxSlice: usd / 4, TTL: time.Minute}},
		{name: "bad max slice", cfg: config.BudgetLeases{MaxSliceUSD: "a lot"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LeaseOptionsFrom(tt.cfg, nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if (got == nil) != (tt.want == nil) || got != nil && (got.MaxSlice != tt.want.MaxSlice || got.TTL != tt.want.TTL) {
				t.Errorf("options %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLeaseLoopWakesWhenDue: a gateway serving requests within its slice
// does not look at its leases on a timer, only when a refill falls due: a
// renewal (a third of TTL into the slice) or the give-back of a slice idle
// for TTL, which still comes by itself once requests stop.
func TestLeaseLoopWakesWhenDue(t *testing.T) {
	e, limits := startApplied(t)
	g := startGateway(t, e, limits, LeaseOptions{ID: "steady", TTL: time.Second})
	s := Scopes{Dept: "eng"}
	if err := g.request(t, s, 1000, 1000, nil); err != nil { // the first grant
		t.Fatal(err)
	}
	looks := g.tr.leases.looks.Load()
	// 400 ms of requests: one renewal falls due (at 0.9 TTL - 2 TTL/3 after
	// the grant); a loop polling every 20 ms would look about 20 times.
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if err := g.request(t, s, 1000, 1000, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.tr.leases.looks.Load() - looks; n > 4 {
		t.Errorf("the refill loop looked at the leases %d times in 400 ms of requests within the slice, want at most 4", n)
	}
	if st := g.tr.LeaseStats(); st.Held != 1 || st.Refills < 2 {
		t.Errorf("stats %+v while serving: want 1 slice held, renewed at least once", st)
	}
	// No more requests: the slice goes back after TTL without use.
	testkit.Wait(t, 10*time.Second, "the condition", func() bool {
		rec := record(t, e.kv0(t), engTotal)
		return rec.Holders["steady"].Slice == 0 && rec.Floor > 0
	})
	if st := g.tr.LeaseStats(); st.Held != 0 {
		t.Errorf("stats %+v after the give-back: want no slice held", st)
	}
}
