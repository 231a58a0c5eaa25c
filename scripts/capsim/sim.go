package main

import (
	"math"
	"math/rand/v2"
	"slices"
)

// The simulation models the budget leases of pkg/budget (lease.go, its
// "Design" comment) at millisecond steps, for a fleet too large to run
// here: gateways admit requests against their slices of each limited
// total, refill them with compare-and-set writes to one KV entry per
// total, see each other's writes after a watch delay, and see spend
// applied by the budget service's folds. It keeps the rule that sizes a
// grant (all that is free when no other gateway is active, else a
// 1/(2(n+1)) share, or what the waiting requests need), refills ahead of
// need below half the last grant, gives room back when another gateway
// wants it, and refuses a request that waited RefillWait. It leaves out
// renewals and idle returns (runs are shorter than the TTL) and settle
// excess (each request costs what it reserved).

// Params are one run's inputs.
type Params struct {
	Gateways int
	RPS      float64 // requests per second over the fleet
	Totals   int     // limited totals (e.g. department budgets)
	Zipf     float64 // skew of requests over totals (s > 1)
	Seconds  int     // simulated time
	CostNano int64   // one request's cost
	// Fill sets each total's limit to its expected spend over the run
	// times Fill: below 1, the hot totals reach their limits mid-run.
	Fill       float64
	CASMs      int // round trip of one KV write or read
	WatchMs    int // a committed write reaches the other gateways' watches
	FoldMs     int // budget service fold interval
	RefillMs   int // RefillWait: how long a request waits for room
	FirstMs    int // FirstGrantWait
	LoopMs     int // how often a gateway's refill loop looks at its leases
	Seed       uint64
	MaxRetries int // CAS attempts per refill
}

// Result is what a run measured.
type Result struct {
	Requests, Admitted, Refused int64
	// RefusedWithHeadroom: refused while the total's limit minus every
	// gateway's spend (applied or not) still covered the request.
	RefusedWithHeadroom int64
	Waited              int64   // requests that waited for a refill
	WaitP50, WaitP99    float64 // ms, of the requests that waited
	Writes, Conflicts   int64   // lease CAS writes committed, and refused
	Reads               int64   // re-reads after a conflict
	HotWritesPerSec     float64 // writes/s on the busiest total
	OverLimitNano       int64   // largest spend past a limit (0 expected)
	AtLimit             int     // totals whose spend reached 99% of the limit
	Seconds             float64
}

type holder struct {
	slice, want int64
}

// record is one revision of a total's lease entry.
type record struct {
	rev     uint64
	at      int // ms it was committed
	floor   int64
	holders map[int]holder
}

type total struct {
	limit   int64
	applied int64     // spend the folds applied
	spent   int64     // spend admitted by every gateway (applied or not)
	hist    []*record // committed records, newest last
	writes  int64
}

type applyAt struct {
	at     int
	amount int64
	floor  int64 // the total's applied spend after the fold
}

type waiter struct {
	cost     int64
	since    int
	deadline int
}

type lease struct {
	g, k      int
	granted   bool
	capLeft   int64 // room the slice still admits
	low       int64 // refill ahead below this
	unapplied int64 // admitted, not yet seen applied
	fresh     int64 // admitted since the last fold
	seenFloor int64 // applied spend as this gateway last saw it
	own       *record
	waiting   []waiter
	inflight  bool
	queued    bool // in sim.waiting
	// A write that left requests wanting room is not repeated until
	// another gateway gave room back or RefillWait passed (refillReason).
	wanted      bool
	wroteAt     int
	wroteOthers int64
	shrunkRev   uint64
	visible     []applyAt // applied spend on its way to this gateway
}

type sim struct {
	p       Params
	rng     *rand.Rand
	totals  []*total
	leases  []map[int]*lease // per gateway, by total
	pending []pendingCAS
	waiting []*lease // leases with waiting requests
	now     int
	res     Result
	waits   []float64
	cdf     []float64
}

type pendingCAS struct {
	l        *lease
	arrive   int // ms the write reaches the server
	back     int // ms its answer reaches the gateway
	rec      *record
	baseRev  uint64
	room     int64
	frozen   bool
	oldLeft  int64 // capLeft before a freeze, back after a conflict
	attempts int
	reread   bool // a re-read after a conflict, not a write
}

// Run runs one simulation.
func Run(p Params) Result {
	s := &sim{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}
	// Zipf weights over totals, and each total's limit from its share.
	w := make([]float64, p.Totals)
	var sum float64
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), p.Zipf)
		sum += w[i]
	}
	s.cdf = make([]float64, p.Totals)
	acc := 0.0
	for i := range w {
		acc += w[i] / sum
		s.cdf[i] = acc
		expected := p.RPS * float64(p.Seconds) * w[i] / sum * float64(p.CostNano)
		t := &total{limit: max(int64(expected*p.Fill), p.CostNano)}
		t.hist = []*record{{holders: map[int]holder{}}}
		s.totals = append(s.totals, t)
	}
	s.leases = make([]map[int]*lease, p.Gateways)
	for g := range s.leases {
		s.leases[g] = map[int]*lease{}
	}
	perMs := p.RPS / 1000 / float64(p.Gateways)
	for s.now = 0; s.now < p.Seconds*1000; s.now++ {
		s.deliver()
		if s.now%p.FoldMs == 0 {
			s.fold()
		}
		for g := range p.Gateways {
			n := poisson(s.rng, perMs)
			for range n {
				s.request(g, s.pick())
			}
			if s.now%p.LoopMs == g%p.LoopMs {
				s.loop(g)
			}
		}
		s.expire()
	}
	s.finish()
	return s.res
}

func (s *sim) pick() int {
	u := s.rng.Float64()
	i, _ := slices.BinarySearch(s.cdf, u)
	return min(i, len(s.cdf)-1)
}

func poisson(r *rand.Rand, mean float64) int {
	if mean > 30 {
		return max(0, int(math.Round(r.NormFloat64()*math.Sqrt(mean)+mean)))
	}
	l, k, p := math.Exp(-mean), 0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// view is the newest record gateway l.g sees: its own last write, or what
// its watch delivered (committed WatchMs ago).
func (s *sim) view(l *lease) *record {
	t := s.totals[l.k]
	seen := t.hist[0]
	for i := len(t.hist) - 1; i >= 0; i-- {
		if t.hist[i].at+s.p.WatchMs <= s.now {
			seen = t.hist[i]
			break
		}
	}
	if l.own != nil && l.own.rev > seen.rev {
		return l.own
	}
	return seen
}

func (s *sim) leaseOf(g, k int) *lease {
	l := s.leases[g][k]
	if l == nil {
		l = &lease{g: g, k: k}
		s.leases[g][k] = l
	}
	return l
}

// catchUp takes in the applied spend that reached gateway l.g's watch.
func (s *sim) catchUp(l *lease) {
	i := 0
	for ; i < len(l.visible) && l.visible[i].at <= s.now; i++ {
		l.unapplied -= l.visible[i].amount
		l.seenFloor = max(l.seenFloor, l.visible[i].floor)
	}
	l.visible = l.visible[i:]
}

func (s *sim) request(g, k int) {
	s.res.Requests++
	l := s.leaseOf(g, k)
	s.catchUp(l)
	c := s.p.CostNano
	t := s.totals[l.k]
	if l.seenFloor+l.unapplied+c > t.limit {
		// Over the limit as this gateway sees it: refused at once.
		s.refuse(t, c)
		return
	}
	if len(l.waiting) == 0 && l.granted && l.capLeft >= c {
		s.admit(l, c)
		if l.capLeft < l.low && !l.inflight {
			s.write(l, 1)
		}
		return
	}
	wait := s.p.RefillMs
	if !l.granted {
		wait = s.p.FirstMs
	}
	l.waiting = append(l.waiting, waiter{cost: c, since: s.now, deadline: s.now + wait})
	if !l.queued {
		l.queued = true
		s.waiting = append(s.waiting, l)
	}
	s.tryWrite(l)
}

// refuse counts a refusal of a request costing c on t.
func (s *sim) refuse(t *total, c int64) {
	s.res.Refused++
	if t.limit-t.spent >= c {
		s.res.RefusedWithHeadroom++
	}
}

// tryWrite writes for l's waiting requests unless a write is in flight or
// the last one could not give them room and nothing changed since.
func (s *sim) tryWrite(l *lease) {
	if l.inflight {
		return
	}
	if l.wanted && s.now-l.wroteAt < s.p.RefillMs {
		if sum, _, _ := others(s.view(l), l.g); sum >= l.wroteOthers {
			return
		}
	}
	s.write(l, 1)
}

func (s *sim) admit(l *lease, c int64) {
	l.capLeft -= c
	l.unapplied += c
	l.fresh += c
	s.totals[l.k].spent += c
	s.res.Admitted++
}

// others sums the other holders' slices in r, counts the active ones and
// says whether one wants room.
func others(r *record, me int) (sum int64, active int, want bool) {
	for id, h := range r.holders {
		if id == me {
			continue
		}
		sum += h.slice
		if h.slice > 0 || h.want > 0 {
			active++
		}
		want = want || h.want > 0
	}
	return sum, active, want
}

// write starts a CAS on l's entry: the grant rule of casOnce.
func (s *sim) write(l *lease, attempt int) {
	v := s.view(l)
	sumOthers, active, othersWant := others(v, l.g)
	// Drawing more keeps the cap (requests go on being admitted while
	// the write is in flight); with another gateway wanting room the cap
	// is frozen at what is used, so the share is computed afresh.
	frozen := l.granted && othersWant
	admitted := l.unapplied
	if l.granted && !frozen {
		admitted += max(l.capLeft, 0)
	}
	floor := max(v.floor, l.seenFloor)
	t := s.totals[l.k]
	free := t.limit - floor - sumOthers - admitted
	room := int64(0)
	if free > 0 {
		room = free
		if active > 0 {
			room = free / int64(2*(active+1))
		}
	}
	var waiting int64
	for _, w := range l.waiting {
		waiting += w.cost
	}
	if free > 0 {
		room = max(room, min(free, waiting))
	}
	h := holder{slice: admitted + room}
	if waiting > room {
		h.want = waiting - room
	}
	rec := &record{floor: floor, holders: make(map[int]holder, len(v.holders)+1)}
	for id, x := range v.holders {
		if id != l.g {
			rec.holders[id] = x
		}
	}
	if h.slice > 0 || h.want > 0 {
		rec.holders[l.g] = h
	}
	old := l.capLeft
	if frozen {
		l.capLeft = 0 // nothing admitted past the frozen cap until the answer
	}
	l.inflight = true
	s.pending = append(s.pending, pendingCAS{l: l, arrive: s.now + s.p.CASMs/2, back: s.now + s.p.CASMs,
		rec: rec, baseRev: v.rev, room: room, frozen: frozen, oldLeft: old, attempts: attempt})
}

// deliver commits writes that reach the server and answers those whose
// round trip ended.
func (s *sim) deliver() {
	cur := s.pending
	s.pending = make([]pendingCAS, 0, len(cur))
	keep := func(pc pendingCAS) { s.pending = append(s.pending, pc) }
	for _, pc := range cur {
		t := s.totals[pc.l.k]
		if !pc.reread && pc.arrive <= s.now && pc.rec.rev == 0 {
			cur := t.hist[len(t.hist)-1]
			if cur.rev == pc.baseRev {
				pc.rec.rev, pc.rec.at = cur.rev+1, s.now
				t.hist = append(t.hist, pc.rec)
				t.writes++
				s.res.Writes++
				if len(t.hist) > 64 {
					t.hist = append(t.hist[:0], t.hist[len(t.hist)-32:]...)
				}
			} else {
				pc.rec.rev = math.MaxUint64 // refused
			}
		}
		if pc.back > s.now {
			keep(pc)
			continue
		}
		l := pc.l
		switch {
		case pc.reread:
			if pc.attempts < s.p.MaxRetries {
				s.write(l, pc.attempts+1)
			} else {
				l.inflight = false
			}
		case pc.rec.rev == math.MaxUint64:
			s.res.Conflicts++
			s.res.Reads++
			if pc.frozen {
				l.capLeft = pc.oldLeft // not written: the old slice holds
			}
			keep(pendingCAS{l: l, back: s.now + s.p.CASMs, reread: true, attempts: pc.attempts})
			continue
		default:
			l.own = pc.rec
			l.wanted, l.wroteAt = pc.rec.holders[l.g].want > 0, s.now
			l.wroteOthers, _, _ = others(pc.rec, l.g)
			if pc.frozen || !l.granted {
				l.capLeft = pc.room
			} else {
				l.capLeft += pc.room
			}
			l.granted = true
			l.low = pc.room / 2
			l.inflight = false
			s.serveWaiting(l)
		}
	}
}

func (s *sim) serveWaiting(l *lease) {
	i := 0
	for ; i < len(l.waiting) && l.capLeft >= l.waiting[i].cost; i++ {
		w := l.waiting[i]
		s.admit(l, w.cost)
		s.res.Waited++
		s.waits = append(s.waits, float64(s.now-w.since))
	}
	l.waiting = l.waiting[i:]
}

// expire refuses requests whose wait ended.
func (s *sim) expire() {
	keep := s.waiting[:0]
	for _, l := range s.waiting {
		if len(l.waiting) == 0 {
			l.queued = false
			continue
		}
		keep = append(keep, l)
		{
			if l.waiting[0].deadline > s.now {
				continue
			}
			t := s.totals[l.k]
			i := 0
			for ; i < len(l.waiting) && l.waiting[i].deadline <= s.now; i++ {
				s.refuse(t, l.waiting[i].cost)
			}
			l.waiting = l.waiting[i:]
			if len(l.waiting) > 0 {
				s.tryWrite(l)
			}
		}
	}
	s.waiting = keep
}

// loop is a gateway's refill loop: refill for waiting requests, ahead of
// need, or give room back that another gateway wants.
func (s *sim) loop(g int) {
	for _, l := range s.leases[g] {
		s.catchUp(l)
		if l.inflight {
			continue
		}
		switch {
		case len(l.waiting) > 0:
			s.tryWrite(l)
		case !l.granted:
		case l.capLeft < l.low:
			s.write(l, 1)
		default:
			v := s.view(l)
			if _, _, want := others(v, g); want && v.rev != l.shrunkRev && v.holders[g].slice > l.unapplied {
				l.shrunkRev = v.rev
				s.write(l, 1)
			}
		}
	}
}

// fold applies the spend admitted since the last fold: the totals have it
// at once (the fold writes them), the gateways see it WatchMs later.
func (s *sim) fold() {
	for _, m := range s.leases {
		for _, l := range m {
			s.totals[l.k].applied += l.fresh
		}
	}
	for _, m := range s.leases {
		for _, l := range m {
			if l.fresh > 0 {
				l.visible = append(l.visible, applyAt{at: s.now + s.p.WatchMs, amount: l.fresh, floor: s.totals[l.k].applied})
				l.fresh = 0
			}
		}
	}
}

func (s *sim) finish() {
	s.res.Seconds = float64(s.p.Seconds)
	for _, t := range s.totals {
		s.res.OverLimitNano = max(s.res.OverLimitNano, t.spent-t.limit)
		s.res.HotWritesPerSec = max(s.res.HotWritesPerSec, float64(t.writes)/float64(s.p.Seconds))
		if float64(t.spent) >= 0.99*float64(t.limit) {
			s.res.AtLimit++
		}
	}
	slices.Sort(s.waits)
	if n := len(s.waits); n > 0 {
		s.res.WaitP50 = s.waits[n/2]
		s.res.WaitP99 = s.waits[min(n-1, n*99/100)]
	}
}
