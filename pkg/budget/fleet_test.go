//go:build capsim

package budget

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// A small fleet of real Trackers with leases on one NATS server, the real
// Consumer folding their events: the run that scripts/capsim's model is
// checked against at the same parameters (docs/design/scale.md):
//
//	go test -tags capsim -run TestFleet -v ./pkg/budget -fleet.gateways 5 -fleet.totals 10 -fleet.rps 2000
var (
	fleetGateways = flag.Int("fleet.gateways", 5, "gateways (Trackers)")
	fleetTotals   = flag.Int("fleet.totals", 10, "limited totals (department limits)")
	fleetRPS      = flag.Float64("fleet.rps", 2000, "requests per second over the fleet")
	fleetSeconds  = flag.Int("fleet.seconds", 8, "seconds of load")
	fleetFill     = flag.Float64("fleet.fill", 0.7, "each limit as a fraction of its total's expected spend over the run")
	fleetZipf     = flag.Float64("fleet.zipf", 1.1, "skew of requests over totals")
)

func TestFleet(t *testing.T) {
	const cost = 2_000_000
	g, k := *fleetGateways, *fleetTotals
	e := startEnv(t)
	run(t, newConsumer(t, e.js, ConsumerOptions{}))
	// Zipf weights, and each limit from its total's expected spend.
	w := make([]float64, k)
	var sum float64
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), *fleetZipf)
		sum += w[i]
	}
	cdf := make([]float64, k)
	limits := make([]Limit, k)
	acc := 0.0
	for i := range w {
		acc += w[i] / sum
		cdf[i] = acc
		exp := *fleetRPS * float64(*fleetSeconds) * w[i] / sum * cost
		limits[i] = Limit{Scope: ScopeDept, Value: fmt.Sprintf("d%d", i), Period: PeriodTotal, AmountNano: max(int64(exp**fleetFill), cost)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	trs := make([]*Tracker, g)
	for i := range trs {
		trs[i] = NewTracker(TrackerOptions{Limits: limits, Leases: &LeaseOptions{ID: "gw-" + itoa(i)}})
		js := e.newJS(t)
		kv, err := js.KeyValue(ctx, Bucket)
		if err != nil {
			t.Fatal(err)
		}
		lkv, err := EnsureLeaseBucket(ctx, js, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() { defer wg.Done(); _ = trs[i].Run(ctx, kv) }()
		go func() { defer wg.Done(); _ = trs[i].RunLeases(ctx, lkv) }()
		<-trs[i].Ready()
		<-trs[i].LeasesReady()
	}
	spent := make([]atomic.Int64, k) // admitted spend per total, every gateway
	var requests, admitted, refused, withHeadroom atomic.Int64
	var waitsMu sync.Mutex
	var waits []time.Duration
	end := time.Now().Add(time.Duration(*fleetSeconds) * time.Second)
	var load sync.WaitGroup
	for gi, tr := range trs {
		load.Add(1)
		go func() {
			defer load.Done()
			rng := rand.New(rand.NewPCG(uint64(gi), 7))
			producer := fmt.Sprintf("gw%014d", gi)
			js := e.newJS(t)
			perTick := *fleetRPS / float64(g) / 100 // a tick is 10 ms
			var carry float64
			var seq uint64
			var dst [4]Checked
			for tick := time.Now(); time.Now().Before(end); tick = tick.Add(10 * time.Millisecond) {
				time.Sleep(time.Until(tick))
				carry += perTick
				n := int(carry)
				carry -= float64(n)
				batch := &usagev1.UsageBatch{ProducerId: producer, CreatedUnixMs: time.Now().UnixMilli()}
				var rs []*Reservation
				for range n {
					requests.Add(1)
					d, _ := slices.BinarySearch(cdf, rng.Float64())
					d = min(d, k-1)
					bd := tr.Bind(Scopes{Dept: limits[d].Value})
					r := bd.Reserve(cost)
					_, waited, err := bd.CheckReserved(ctx, nil, cost, dst[:0])
					if waited > 0 {
						waitsMu.Lock()
						waits = append(waits, waited)
						waitsMu.Unlock()
					}
					if err != nil {
						r.Release()
						refused.Add(1)
						if limits[d].AmountNano-spent[d].Load() >= cost {
							withHeadroom.Add(1)
						}
						continue
					}
					spent[d].Add(cost)
					admitted.Add(1)
					r.Settle(cost)
					batch.Events = append(batch.Events, &usagev1.UsageEvent{EventId: fmt.Sprintf("%s-%d-%d", producer, seq, len(batch.Events)),
						Timestamp: time.Now().UnixNano(), Dept: limits[d].Value, CostNanoUsd: cost})
					rs = append(rs, r)
				}
				if len(rs) == 0 {
					continue
				}
				seq++
				batch.Seq = seq
				data, err := batch.MarshalVT()
				if err != nil {
					t.Error(err)
					return
				}
				ack, err := js.Publish(ctx, usage.BatchSubject(producer), data)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rs {
					r.Published(ack.Sequence)
				}
			}
		}()
	}
	load.Wait()
	var st LeaseStats
	for _, tr := range trs {
		s := tr.LeaseStats()
		st.Refills += s.Refills
		st.Conflicts += s.Conflicts
		st.Waits += s.Waits
	}
	slices.Sort(waits)
	q := func(p float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(len(waits)-1, int(p*float64(len(waits))))]
	}
	over, atLimit := int64(0), 0
	for i := range limits {
		over = max(over, spent[i].Load()-limits[i].AmountNano)
		if float64(spent[i].Load()) >= 0.99*float64(limits[i].AmountNano) {
			atLimit++
		}
	}
	s := float64(*fleetSeconds)
	n := requests.Load()
	pct := func(x int64) string { return fmt.Sprintf("%d (%.3f%%)", x, 100*float64(x)/float64(n)) }
	t.Logf("| %d | %d | %.0f | %.0f | %s | %v / %v | %s | %s | %d | %d nano-USD |",
		g, k, float64(st.Refills)/s, float64(st.Conflicts)/s, pct(int64(st.Waits)), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond),
		pct(refused.Load()), pct(withHeadroom.Load()), atLimit, over)
}
