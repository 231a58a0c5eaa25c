package budget

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// ErrOverBudget is matched (errors.Is) by every *ExceededError.
var ErrOverBudget = errors.New("over budget")

// ExceededError says which limit refused a request and why, as separate
// figures (issue #15): what was applied, what requests in flight hold, what
// other gateways hold, and this request's own worst-case estimate. The
// request was refused because SpendNano + ReservedNano + HeldNano +
// EstimateNano is over LimitNano (or, with leases, because this gateway
// could not draw the room in time); all amounts are nano-USD.
type ExceededError struct {
	Scope Scope
	// Value is the scope value whose total is over ("" for global).
	Value  string
	Period Period
	// PeriodStart is the period as stored in SpendTotal ("2026-11", "" for total).
	PeriodStart string
	// LimitNano is the limit.
	LimitNano int64
	// SpendNano is the applied spend: the total as this gateway last saw it.
	SpendNano int64
	// ReservedNano is what this gateway's other requests in flight have
	// reserved on the total (their worst case, or their cost until applied).
	ReservedNano int64
	// HeldNano is, with budget leases, the part of the limit this gateway
	// cannot draw beyond SpendNano and ReservedNano: the slices other
	// gateways hold and spend applied elsewhere that this gateway has not
	// seen yet. 0 without leases.
	HeldNano int64
	// EstimateNano is this request's own worst-case cost: what it reserves.
	EstimateNano int64
}

// Error names the scope, value, period and limit, then each figure.
func (e *ExceededError) Error() string {
	v := e.Value
	if e.Scope == ScopeGlobal {
		v = "all"
	}
	held := ""
	if e.HeldNano != 0 {
		held = ", held by other gateways " + pricing.FormatUSD(e.HeldNano)
	}
	return fmt.Sprintf("budget exceeded: %s %q %s limit %s USD: spent %s, reserved by requests in flight %s%s, this request's worst case %s",
		e.Scope, v, e.Period, pricing.FormatUSD(e.LimitNano), pricing.FormatUSD(e.SpendNano),
		pricing.FormatUSD(e.ReservedNano), held, pricing.FormatUSD(e.EstimateNano))
}

// Is reports target == ErrOverBudget.
func (e *ExceededError) Is(target error) bool { return target == ErrOverBudget }

// Scopes are the values a request is accounted under: the principal's API
// key id, subject, team, dept and project. Empty fields are skipped; every
// request also counts towards global.
type Scopes struct {
	Key, Subject, Team, Dept, Project string
}

// Value returns the value of scope sc ("" for global).
func (s *Scopes) Value(sc Scope) string {
	switch sc {
	case ScopeDept:
		return s.Dept
	case ScopeTeam:
		return s.Team
	case ScopeProject:
		return s.Project
	case ScopeSubject:
		return s.Subject
	case ScopeKey:
		return s.Key
	}
	return ""
}

// TrackerOptions configure a Tracker. Zero values take the defaults shown.
type TrackerOptions struct {
	// Limits are the configured limits (from ParseLimits).
	Limits []Limit
	// Now is the clock that picks the day and month being checked. Default time.Now.
	Now func() time.Time
	// Grace bounds how long a published reservation is kept after the
	// stream-wide watermark (the largest as_of_seq seen) has passed its
	// sequence while one of its totals has not: that happens when the event
	// landed in another day than the reservation (a request running across
	// midnight UTC). Default 10s.
	Grace time.Duration
	// AckWait bounds how long a reservation awaits its usage event's ack
	// (Await, OnAck) before the watch loop releases it: an event without an
	// ack went to the publisher's spool. Default DefaultAckWait (2m).
	AckWait time.Duration
	// Leases, when set, make every limit hold across gateways: admission
	// draws on this gateway's slice of each limited total (lease.go), kept
	// by RunLeases. Nil: each gateway checks limits against the applied
	// totals and its own reservations only.
	Leases *LeaseOptions
}

// Tracker keeps every spend total of the KV bucket in memory, plus this
// gateway's reservations for requests whose cost is not in the totals yet,
// and checks requests against limits.
//
// Invariant: a request is admitted only if every applicable limit L has
// spend + reserved + estimate <= L, and it is charged at most its estimate
// when the gateway clamps max_tokens to Headroom. Reservations are dropped
// only once the total's as_of_seq covers the request's event, so on one
// gateway spend never exceeds a limit. Across N gateways, each sees the
// others' spend only once the budget consumer has written it to the KV and
// the watch has delivered it, so the overshoot is at most the other
// gateways' in-flight reservations within one propagation delay
// (publish -> consumer batch -> KV -> watch).
//
// Reads (Check, Bind and its steps) take only a per-shard read lock and
// atomics; the single watch goroutine in Run writes.
type Tracker struct {
	now    func() time.Time
	grace  int64
	limits atomic.Pointer[limitIndex] // replaced whole by SetLimits
	// startNames caches the current periods' formatted starts.
	startNames atomic.Pointer[periodStartNames]
	seed       maphash.Seed
	shards     [trackerShards]trackerShard
	bindings   [bindShards]bindShard // binding.go

	maxAsOf atomic.Uint64 // largest as_of_seq seen in any total

	pendMu  sync.Mutex
	pending []*Reservation // published, not fully released; guarded by pendMu

	// What the last sweep saw; only the watch goroutine touches these.
	// pending starts with the sweptN reservations that sweep kept. Until
	// apply stores a total (applied moves on) or graceDue passes, nothing
	// can release them, so the next sweep looks only at the reservations
	// published since: a backlog that the totals do not reach (the budget
	// consumer down) costs a sweep nothing.
	applied  uint64 // totals stored by apply
	sweptAt  uint64 // applied as the last sweep saw it
	sweptN   int
	graceDue int64 // earliest coveredAt+grace among the kept, or 0

	await       [awaitShards]awaitShard // reservations awaiting their event's ack (await.go)
	ackWait     int64                   // ns
	unacked     atomic.Uint64           // released for want of an ack
	lastUnacked int64                   // unix ns of the last sweepUnacked; watch loop only
	timedSweeps atomic.Uint64           // sweeps the watch loop's timer started

	// asleep is set while the watch loop waits without its timer (nothing
	// pending or awaiting an ack); the next Await or Published then sends
	// on wake. An idle gateway's loop does not wake at all.
	asleep atomic.Bool
	wake   chan struct{}

	readyOnce sync.Once
	ready     chan struct{}

	leases *leases // nil without TrackerOptions.Leases
}

const trackerShards = 64

// trackerShard is one slice of the totals; mu guards m (the slots
// themselves are atomics).
type trackerShard struct {
	mu sync.RWMutex
	m  map[TotalID]*slot
	_  [32]byte
}

// slot is one total as the Tracker sees it.
type slot struct {
	spend    atomic.Int64
	asOf     atomic.Uint64
	reserved atomic.Int64
	// drained is the sum of reservations released because the total came
	// to include them since the total was leased (what left the unapplied
	// spend; kept only for leased totals).
	drained atomic.Int64
	lease   atomic.Pointer[lease] // this gateway's slice, once limited and leased
	rev     uint64                // KV revision stored; only the watch goroutine touches it
}

// limitIndex finds the limits for a scope value without allocating.
type limitIndex struct {
	star  [numScopes][]Limit
	exact [numScopes]map[string][]Limit
	// anyDept holds the "*/name" limits of team and project by name.
	anyDept [numScopes]map[string][]Limit
	all     []Limit // as configured, for Report
}

func newLimitIndex(limits []Limit) limitIndex {
	var ix limitIndex
	for _, l := range limits {
		m, v := &ix.exact[l.Scope], l.Value
		switch {
		case l.Scope == ScopeGlobal || l.Value == Star:
			ix.star[l.Scope] = append(ix.star[l.Scope], l)
			continue
		case l.anyDept():
			m, v = &ix.anyDept[l.Scope], l.Value[2:]
		}
		if *m == nil {
			*m = make(map[string][]Limit)
		}
		(*m)[v] = append((*m)[v], l)
	}
	return ix
}

// NewTracker returns a Tracker with no totals; Run fills it.
func NewTracker(o TrackerOptions) *Tracker {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	t := &Tracker{
		now:     o.Now,
		grace:   int64(o.Grace),
		ackWait: int64(o.AckWait),
		seed:    maphash.MakeSeed(),
		ready:   make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	for i := range t.shards {
		t.shards[i].m = make(map[TotalID]*slot)
	}
	for i := range t.await {
		t.await[i].m = make(map[string]awaiting)
	}
	if o.Leases != nil {
		t.leases = newLeases(*o.Leases)
	}
	t.SetLimits(o.Limits)
	return t
}

// SetLimits replaces the configured limits (a config reload). Requests
// checked afterwards see the new limits; reservations are kept.
func (t *Tracker) SetLimits(limits []Limit) {
	ix := newLimitIndex(limits)
	ix.all = append([]Limit(nil), limits...)
	t.limits.Store(&ix)
	if t.leases != nil {
		t.leases.limGen.Add(1) // each lease takes its limit afresh
	}
}

// LimitStatus is one configured limit applied to one scope value, as the
// admin API and the budget metrics show it.
type LimitStatus struct {
	Scope       string  `json:"scope"`
	Value       string  `json:"value"`
	Period      string  `json:"period"`
	PeriodStart string  `json:"period_start"`
	LimitNano   int64   `json:"limit_nano_usd"`
	SpendNano   int64   `json:"spend_nano_usd"`
	Reserved    int64   `json:"reserved_nano_usd"`
	Utilization float64 `json:"utilization"`
	AsOfSeq     uint64  `json:"as_of_seq"`
	// Forecast projects the applied spend at the rate of the scope value's
	// day totals over the trailing window (Project).
	Forecast Forecast `json:"forecast"`
}

// Report lists every configured limit with its current spend: an exact
// limit once, a "*" or "*/name" limit once per value it matches with a
// total in the current period.
func (t *Tracker) Report() []LimitStatus {
	ix := t.limits.Load()
	now := t.now()
	starts := periodStarts(now.UnixNano())
	var out []LimitStatus
	add := func(l Limit, v string) {
		id := TotalID{Scope: l.Scope, Value: v, Period: l.Period, Start: starts[l.Period]}
		spend, res, seq := t.Spend(id)
		st := LimitStatus{Scope: l.Scope.String(), Value: v, Period: l.Period.String(), PeriodStart: id.PeriodStart(),
			LimitNano: l.AmountNano, SpendNano: spend, Reserved: res, AsOfSeq: seq,
			Forecast: Project(l.AmountNano, spend, id.PeriodEnd(), now, t.dayTotals(l.Scope, v, starts[PeriodDay]))}
		if l.AmountNano > 0 {
			st.Utilization = float64(spend+res) / float64(l.AmountNano)
		}
		out = append(out, st)
	}
	for _, l := range ix.all {
		if !l.perValue() {
			add(l, l.Value)
			continue
		}
		for _, v := range t.values(l.Scope, l.Period, starts[l.Period], l.Matches) {
			add(l, v)
		}
	}
	return out
}

// Values lists, sorted, the values of scope with a total in the current
// period that match keep (every value when keep is nil): the departments
// with spend this month, say, for the console's overview.
func (t *Tracker) Values(scope Scope, period Period, keep func(v string) bool) []string {
	return t.values(scope, period, periodStarts(t.now().UnixNano())[period], keep)
}

func (t *Tracker) values(scope Scope, period Period, start int32, keep func(v string) bool) []string {
	var values []string
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		for id := range sh.m {
			if id.Scope == scope && id.Period == period && id.Start == start && (keep == nil || keep(id.Value)) {
				values = append(values, id.Value)
			}
		}
		sh.mu.RUnlock()
	}
	sort.Strings(values)
	return values
}

// Applied returns the applied all-time spend of one scope: the sum of its
// values' total-period totals, nano-USD. Summed over the global scope it
// is the applied spend of every event; set against what the usage events
// hold it is the drift the console shows (as tollctl reconcile --by-scope
// does against the stream). Like Reserved it reads every slot.
func (t *Tracker) Applied(scope Scope) int64 {
	if scope >= numScopes {
		return 0
	}
	var sum int64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		for id, sl := range sh.m {
			if id.Scope == scope && id.Period == PeriodTotal {
				sum += sl.spend.Load()
			}
		}
		sh.mu.RUnlock()
	}
	return sum
}

// dayTotals returns the applied day totals of one scope value over the
// forecast window ending on today.
func (t *Tracker) dayTotals(sc Scope, v string, today int32) []DayTotal {
	days := make([]DayTotal, 0, ForecastWindowDays)
	for d := today - (ForecastWindowDays - 1); d <= today; d++ {
		if spend, _, _ := t.Spend(TotalID{Scope: sc, Value: v, Period: PeriodDay, Start: d}); spend > 0 {
			days = append(days, DayTotal{Day: d, SpendNano: spend})
		}
	}
	return days
}

// Ready is closed once Run has loaded every total present at its start.
func (t *Tracker) Ready() <-chan struct{} { return t.ready }

func (t *Tracker) shard(id *TotalID) *trackerShard {
	h := maphash.String(t.seed, id.Value) ^ uint64(id.Scope)<<56 ^ uint64(id.Period)<<48 ^ uint64(uint32(id.Start))
	return &t.shards[h%trackerShards]
}

func (t *Tracker) lookup(id TotalID) *slot {
	sh := t.shard(&id)
	sh.mu.RLock()
	s := sh.m[id]
	sh.mu.RUnlock()
	return s
}

func (t *Tracker) slotFor(id TotalID) *slot {
	sh := t.shard(&id)
	sh.mu.RLock()
	s := sh.m[id]
	sh.mu.RUnlock()
	if s != nil {
		return s
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s = sh.m[id]; s == nil {
		s = &slot{}
		sh.m[id] = s
	}
	return s
}

// Spend returns what the Tracker knows of one total: the applied spend, the
// reservations on it, and the stream sequence the spend includes.
func (t *Tracker) Spend(id TotalID) (spendNano, reservedNano int64, asOfSeq uint64) {
	if s := t.lookup(id); s != nil {
		return s.spend.Load(), s.reserved.Load(), s.asOf.Load()
	}
	return 0, 0, 0
}

// Reserved returns this gateway's reserved spend for one scope (the sum
// over all its values), for a metric: the sum of the reservations on the
// scope's total-period slots, each reservation being on one of them. It
// reads every slot, so that requests share no counter: a scrape pays for
// it, not every request.
func (t *Tracker) Reserved(scope Scope) int64 {
	if scope >= numScopes {
		return 0
	}
	var sum int64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		for id, sl := range sh.m {
			if id.Scope == scope && id.Period == PeriodTotal {
				sum += sl.reserved.Load()
			}
		}
		sh.mu.RUnlock()
	}
	return sum
}

// Check returns an *ExceededError for the first applicable limit, from the
// configured limits and then claims (from FromClaims), that has no headroom
// for estimateNano more: spend + reserved + estimate > limit. It returns nil
// when every limit has room. It does not allocate unless it refuses. It
// does not consult leases: the gateway admits with Reserve and
// CheckReserved.
func (t *Tracker) Check(s Scopes, claims []Limit, estimateNano int64) error {
	var err error
	t.eachBound(t.bind(&s, periodStarts(t.now().UnixNano())), &s, claims, func(l *Limit, v string, id TotalID, sl *slot, _ bool) bool {
		var spend, reserved int64
		if sl != nil {
			spend, reserved = sl.spend.Load(), sl.reserved.Load()
		}
		if spend+reserved+estimateNano > l.AmountNano {
			err = &ExceededError{Scope: l.Scope, Value: v, Period: l.Period, PeriodStart: id.PeriodStart(),
				LimitNano: l.AmountNano, SpendNano: spend, ReservedNano: reserved, EstimateNano: estimateNano}
			return false
		}
		return true
	})
	return err
}

// Bound is one request's scopes bound to their totals at one instant, for
// the steps of its admission in turn (Headroom, Reserve, CheckReserved):
// the totals are looked up and the clock is read once per request, not
// once per step, and every step sees the same day and month.
type Bound struct {
	t   *Tracker
	s   Scopes
	b   *binding
	now int64 // unix ns
}

// Bind binds s at the current instant.
func (t *Tracker) Bind(s Scopes) Bound {
	now := t.now().UnixNano()
	return Bound{t: t, s: s, b: t.bind(&s, periodStarts(now)), now: now}
}

// Headroom returns the smallest remaining amount (limit - spend - reserved,
// at least 0) over every applicable limit, for clamping max_tokens; limited
// is false when no limit applies. With leases, a limit's remaining amount
// is at most what this gateway can admit: what its slice still admits, or
// what a refill could draw, whichever is more.
func (bd Bound) Headroom(claims []Limit) (nano int64, limited bool) {
	t, now := bd.t, bd.now
	t.eachBound(bd.b, &bd.s, claims, func(l *Limit, _ string, _ TotalID, sl *slot, _ bool) bool {
		left := l.AmountNano
		if sl != nil {
			left -= sl.spend.Load() + sl.reserved.Load()
			if le := sl.lease.Load(); le != nil && t.leases != nil {
				left = min(left, t.leaseHeadroom(le, l.AmountNano, now))
			}
		}
		if !limited || left < nano {
			nano, limited = left, true
		}
		return true
	})
	return max(nano, 0), limited
}

// Checked is one limit a request was checked against at admission, with
// the numbers of that moment: what the usage event records so that an
// operator can later see why a request was admitted, clamped or refused.
type Checked struct {
	Scope Scope
	// Value is the scope value limited ("" for global).
	Value  string
	Period Period
	// PeriodStart is the period as stored in SpendTotal ("2026-11", "" for total).
	PeriodStart string
	// FromToken is true for a limit from the token's budgets claim.
	FromToken bool
	// LimitNano is the limit; SpentNano the applied total plus this
	// gateway's reservations for other requests, without the request's own
	// reservation; both in nano-USD. With leases, SpentNano is LimitNano
	// minus what the gateway could admit (Headroom) before the request, so
	// it also counts what other gateways hold.
	LimitNano, SpentNano int64
}

// HeadroomNano is LimitNano - SpentNano: the room the request was checked
// against (negative when the spend was already over).
func (c *Checked) HeadroomNano() int64 { return c.LimitNano - c.SpentNano }

// CheckReserved is Check for a request whose reservation of ownNano
// (Reserve) is already in the totals, so it checks spend + reserved <=
// limit, and it appends every limit it checks to dst with the spend seen
// (own reservation excluded). It appends at most cap(dst)-len(dst) entries
// and never grows dst, so it does not allocate unless it refuses or waits;
// when dst is full, the refusing limit replaces the last entry.
//
// With leases, each limit must also fit this gateway's slice of the total
// (no network: atomics). When one does not, it waits for a refill, at most
// LeaseOptions.RefillWait (FirstGrantWait for a total this gateway holds no
// slice of), or until ctx ends, then refuses; waited is how long it waited
// (0 when it did not).
func (bd Bound) CheckReserved(ctx context.Context, claims []Limit, ownNano int64, dst []Checked) (checked []Checked, waited time.Duration, err error) {
	t, s := bd.t, &bd.s
	n := len(dst)
	checked, short, err := t.checkReserved(bd.b, bd.now, s, claims, ownNano, dst)
	if short.le == nil || err != nil {
		return checked, 0, err
	}
	ls := t.leases
	wait := ls.o.RefillWait
	if !short.le.granted.Load() || short.le.idle.Load() {
		wait = max(wait, ls.o.FirstGrantWait)
	}
	begin := time.Now()
	deadline := begin.Add(wait)
	ls.waits.Add(1)
	for short.le != nil && err == nil {
		refilled := t.waitRefill(ctx, short.le, deadline)
		now := t.now().UnixNano()
		checked, short, err = t.checkReserved(t.bind(s, periodStarts(now)), now, s, claims, ownNano, dst[:n])
		if !refilled {
			break
		}
	}
	waited = time.Since(begin)
	ls.waitHist.observe(waited)
	if err == nil && short.le != nil {
		ls.refusedWithRoom.Add(1)
		l := short.l
		err = &ExceededError{Scope: l.Scope, Value: short.v, Period: l.Period, PeriodStart: short.periodStart,
			LimitNano: l.AmountNano, SpendNano: short.spend, ReservedNano: short.reserved - ownNano,
			HeldNano: l.AmountNano - short.headroom - short.spend - short.reserved, EstimateNano: ownNano}
	}
	return checked, waited, err
}

// shortLease is a limit whose lease did not admit a reserved request.
type shortLease struct {
	le          *lease
	l           *Limit
	v           string
	periodStart string
	headroom    int64 // what the gateway could admit, own reservation included
	// spend and reserved are the total's applied spend and this gateway's
	// reservations (own included) when the lease fell short.
	spend, reserved int64
}

// checkReserved is one pass of CheckReserved: err is a refusal by the
// totals, short the first limit whose lease does not admit the request.
func (t *Tracker) checkReserved(b *binding, now int64, s *Scopes, claims []Limit, ownNano int64, dst []Checked) ([]Checked, shortLease, error) {
	names := t.periodNames(b.starts)
	var err error
	var short shortLease
	t.eachBound(b, s, claims, func(l *Limit, v string, id TotalID, sl *slot, fromToken bool) bool {
		var spend, reserved int64
		if sl != nil {
			spend, reserved = sl.spend.Load(), sl.reserved.Load()
		}
		used := spend + reserved
		c := Checked{Scope: l.Scope, Value: v, Period: l.Period, PeriodStart: names.names[l.Period],
			FromToken: fromToken, LimitNano: l.AmountNano, SpentNano: used - ownNano}
		refuse := used > l.AmountNano && err == nil
		if t.leases != nil && sl != nil && !refuse {
			le := t.leaseFor(sl, &id, l)
			hr := min(l.AmountNano-used, t.leaseHeadroom(le, l.AmountNano, now))
			c.SpentNano = l.AmountNano - hr - ownNano
			if !t.fitLease(le, now) && short.le == nil {
				short = shortLease{le: le, l: l, v: v, periodStart: c.PeriodStart, headroom: hr, spend: spend, reserved: reserved}
			}
		}
		switch {
		case len(dst) < cap(dst):
			dst = append(dst, c)
		case refuse && len(dst) > 0:
			dst[len(dst)-1] = c
		}
		if refuse {
			err = &ExceededError{Scope: l.Scope, Value: v, Period: l.Period, PeriodStart: c.PeriodStart,
				LimitNano: l.AmountNano, SpendNano: spend, ReservedNano: reserved - ownNano, EstimateNano: ownNano}
		}
		return true
	})
	return dst, short, err
}

// periodStartNames caches the formatted starts of the current periods, so
// that CheckReserved does not format dates per request.
type periodStartNames struct {
	starts [numPeriods]int32
	names  [numPeriods]string
}

// periodNames returns the names of starts, formatting them only when the
// day or month changed since the last call.
func (t *Tracker) periodNames(starts [numPeriods]int32) *periodStartNames {
	if pn := t.startNames.Load(); pn != nil && pn.starts == starts {
		return pn
	}
	pn := &periodStartNames{starts: starts}
	for p := range numPeriods {
		pn.names[p] = TotalID{Period: p, Start: starts[p]}.PeriodStart()
	}
	t.startNames.Store(pn)
	return pn
}

func (t *Tracker) used(id TotalID) int64 {
	if s := t.lookup(id); s != nil {
		return s.spend.Load() + s.reserved.Load()
	}
	return 0
}

// eachConfigured calls f with every limit of ix applying to s and the value
// it limits, until f returns false; it returns false when f did.
func eachConfigured(ix *limitIndex, s *Scopes, f func(l *Limit, v string) bool) bool {
	for sc := range numScopes {
		v := s.Value(sc)
		if sc != ScopeGlobal && v == "" {
			continue
		}
		for i := range ix.star[sc] {
			if !f(&ix.star[sc][i], v) {
				return false
			}
		}
		if ls, ok := ix.exact[sc][v]; ok {
			for i := range ls {
				if !f(&ls[i], v) {
					return false
				}
			}
		}
		if m := ix.anyDept[sc]; m != nil {
			ls := m[qualifiedName(v)]
			for i := range ls {
				if !f(&ls[i], v) {
					return false
				}
			}
		}
	}
	return true
}

// maxSlots is the most totals one request touches: 6 scopes x 3 periods.
const maxSlots = int(numScopes) * int(numPeriods)

// Reservation is one request's spend that the totals do not include yet.
// Every Reservation must end with Published or Release.
type Reservation struct {
	t *Tracker

	b *binding // the totals it holds amount on: b.slots[:b.n]

	mu          sync.Mutex // guards the fields below
	amount      int64
	released    uint32 // bit i set: b.slots[i] no longer holds amount
	seq         uint64
	coveredAt   int64 // unix ns when the watermark first passed seq, or 0
	publishedAt int64
}

// Reserve adds estimateNano to every total the request counts towards
// (each scope value of s, and global, for day, month and total) until the
// request's event is in those totals.
func (bd Bound) Reserve(estimateNano int64) *Reservation {
	t, b := bd.t, bd.b
	r := &Reservation{t: t, b: b, amount: estimateNano}
	for i := range b.n {
		b.slots[i].reserved.Add(estimateNano)
	}
	return r
}

// adjust adds d to slot i's reservation. r.mu is held.
func (r *Reservation) adjust(i int, d int64) { r.b.slots[i].reserved.Add(d) }

// release drops slot i's reservation; applied says the total now includes
// it (it moves to the slot's drained spend, before it leaves reserved, so
// that a lease never sees it in neither). r.mu is held.
func (r *Reservation) release(i int, applied bool) {
	if r.released&(1<<i) == 0 {
		r.released |= 1 << i
		if sl := r.b.slots[i]; applied && sl.lease.Load() != nil {
			sl.drained.Add(r.amount) // leases only: no write shared by every request otherwise
		}
		r.adjust(i, -r.amount)
	}
}

func (r *Reservation) done() bool { return r.released == 1<<r.b.n-1 }

// Settle replaces the estimate by the request's actual cost.
func (r *Reservation) Settle(actualNano int64) {
	r.mu.Lock()
	d := actualNano - r.amount
	for i := range r.b.n {
		if r.released&(1<<i) == 0 {
			r.adjust(i, d)
		}
	}
	r.amount = actualNano
	r.mu.Unlock()
}

// Release drops the reservation at once: the request cost nothing or its
// event will never be published.
func (r *Reservation) Release() {
	r.mu.Lock()
	for i := range r.b.n {
		r.release(i, false)
	}
	r.mu.Unlock()
}

// Published records the stream sequence of the request's usage event. Each
// total's share of the reservation is dropped once that total's as_of_seq
// reaches seq; totals already there are released at once.
//
// r joins the sweeps' list before it looks at its totals, so no store is
// missed without a timer: a total stored after the look is followed by a
// sweep (the watch loop sweeps after every run of updates), and that sweep
// finds r in the list. A share released here leaves r in the list until
// the next sweep drops it.
func (r *Reservation) Published(seq uint64) {
	r.mu.Lock()
	r.seq = seq
	r.publishedAt = r.t.now().UnixNano()
	r.mu.Unlock()
	r.t.pendMu.Lock()
	r.t.pending = append(r.t.pending, r)
	r.t.pendMu.Unlock()
	r.mu.Lock()
	r.releaseCovered()
	r.mu.Unlock()
	r.t.wakeSweeps()
}

// releaseCovered releases every slot whose total includes r.seq. r.mu is held.
func (r *Reservation) releaseCovered() {
	for i := range r.b.n {
		if r.released&(1<<i) == 0 && r.b.slots[i].asOf.Load() >= r.seq {
			r.release(i, true)
		}
	}
}

// sweep releases what the totals now cover, and after Grace whatever the
// stream-wide watermark has passed. Only the watch goroutine calls it.
func (t *Tracker) sweep(now int64) {
	t.pendMu.Lock()
	list := t.pending
	t.pending = nil
	t.pendMu.Unlock()
	if len(list) == 0 {
		return // and sweptN is 0: pending always starts with what the last sweep kept
	}
	from := 0 // a total moved or a grace ran out: look at every reservation
	if t.applied == t.sweptAt && (t.graceDue == 0 || now < t.graceDue) {
		from = min(t.sweptN, len(list))
	} else {
		t.graceDue = 0
	}
	t.sweptAt = t.applied
	w := t.maxAsOf.Load()
	keep := list[:from]
	for _, r := range list[from:] {
		r.mu.Lock()
		r.releaseCovered()
		if !r.done() && r.seq <= w {
			if r.coveredAt == 0 {
				r.coveredAt = now
			} else if now-r.coveredAt >= t.grace {
				for i := range r.b.n {
					r.release(i, false)
				}
			}
		}
		if !r.done() {
			keep = append(keep, r)
			if r.coveredAt != 0 && (t.graceDue == 0 || r.coveredAt+t.grace < t.graceDue) {
				t.graceDue = r.coveredAt + t.grace
			}
		}
		r.mu.Unlock()
	}
	clear(list[len(keep):])
	t.sweptN = len(keep)
	t.pendMu.Lock()
	t.pending = append(keep, t.pending...)
	t.pendMu.Unlock()
}

// apply stores one KV entry. Only the watch goroutine calls it.
func (t *Tracker) apply(e jetstream.KeyValueEntry) error {
	id, err := ParseKey(e.Key())
	if err != nil {
		return err
	}
	s := t.slotFor(id)
	if e.Revision() <= s.rev {
		return nil
	}
	s.rev = e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		s.spend.Store(0)
		return nil
	}
	var st usagev1.SpendTotal
	if err := proto.Unmarshal(e.Value(), &st); err != nil {
		return fmt.Errorf("decode total %s: %w", e.Key(), err)
	}
	s.spend.Store(st.CostNanoUsd)
	s.asOf.Store(st.AsOfSeq)
	t.applied++
	for {
		w := t.maxAsOf.Load()
		if st.AsOfSeq <= w || t.maxAsOf.CompareAndSwap(w, st.AsOfSeq) {
			break
		}
	}
	return nil
}

// Run keeps the totals of kv in memory until ctx ends, re-establishing the
// watch if it stops. Entries it cannot parse are skipped. It returns
// ctx.Err() once ctx ends.
func (t *Tracker) Run(ctx context.Context, kv jetstream.KeyValue) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if err := t.watch(ctx, kv, timer); ctx.Err() != nil {
			return ctx.Err()
		} else if err != nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
}

func (t *Tracker) watch(ctx context.Context, kv jetstream.KeyValue, timer *time.Timer) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return fmt.Errorf("watch spend totals: %w", err)
	}
	updates := w.Updates()
	for {
		var tc <-chan time.Time
		if !t.sleep() {
			timer.Reset(t.sweepWait(t.now().UnixNano()))
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.wake:
		case <-tc:
			t.timedSweeps.Add(1)
			now := t.now().UnixNano()
			t.sweep(now)
			if now-t.lastUnacked >= int64(time.Second) {
				t.lastUnacked = now
				t.sweepUnacked(now)
			}
		case e, ok := <-updates:
			if !ok {
				return errors.New("spend watch closed")
			}
			if e == nil {
				t.readyOnce.Do(func() { close(t.ready) })
				continue
			}
			_ = t.apply(e) // a foreign key in the bucket is not ours to track
			if len(updates) == 0 {
				t.sweep(t.now().UnixNano())
			}
		}
	}
}

// sweepWait is how long the watch loop waits, with nothing arriving, before
// it sweeps on its own: until the earliest grace runs out or the next look
// for reservations without an ack (once a second), at least a millisecond.
// Nothing else needs a timed sweep: the totals are swept as they arrive, and
// Published looks at them itself. So while requests flow the loop wakes for
// the totals, not 20 times a second as with a fixed tick.
func (t *Tracker) sweepWait(now int64) time.Duration {
	next := t.lastUnacked + int64(time.Second)
	if t.graceDue != 0 && t.graceDue < next {
		next = t.graceDue
	}
	return time.Duration(min(max(next-now, int64(time.Millisecond)), int64(time.Second)))
}

// sleep reports whether the watch loop's sweeps have nothing to look at (no
// reservation published and not released, none awaiting an ack), marking
// the tracker asleep when so. The mark comes before the look: a
// reservation added meanwhile is either seen by the look or sees the mark
// (wakeSweeps).
func (t *Tracker) sleep() bool {
	t.pendMu.Lock()
	n := len(t.pending)
	t.pendMu.Unlock()
	if n > 0 {
		return false
	}
	t.asleep.Store(true)
	t.pendMu.Lock()
	n = len(t.pending)
	t.pendMu.Unlock()
	if n > 0 || t.Awaiting() > 0 {
		t.asleep.Store(false)
		return false
	}
	return true
}

// wakeSweeps wakes the watch loop when it sleeps: a reservation was just
// added where the sweeps look.
func (t *Tracker) wakeSweeps() {
	if t.asleep.Load() && t.asleep.CompareAndSwap(true, false) {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// Used returns the spend plus reservations of one scope value's total for
// the current period, in nano-USD.
func (t *Tracker) Used(scope Scope, value string, period Period) int64 {
	starts := periodStarts(t.now().UnixNano())
	return t.used(TotalID{Scope: scope, Value: value, Period: period, Start: starts[period]})
}

// PeriodStart returns the current period's start as stored in totals
// ("2026-11-30", "2026-11", "" for total).
func (t *Tracker) PeriodStart(period Period) string {
	starts := periodStarts(t.now().UnixNano())
	return TotalID{Period: period, Start: starts[period]}.PeriodStart()
}
