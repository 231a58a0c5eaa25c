package budget

import (
	"hash/maphash"
	"sync"
)

// A binding is what the requests of one Scopes value touch in the current
// periods: the slots Reserve adds to, and the configured limits that apply
// with the slots they are checked against. The Tracker resolves it once
// per Scopes value, period and limit set, so that admission does one map
// lookup per request (Bind) instead of one per total (up to 18 for Reserve,
// one per limit for Headroom and CheckReserved): atomics only after that.
//
// Slots are never removed from the Tracker, so a binding's slot pointers
// stay the totals' own until its periods end; a new day or month, or
// SetLimits, makes the next request build a new one.
type binding struct {
	ix     *limitIndex
	starts [numPeriods]int32

	// The totals a request counts towards (Reserve), in scope then period order.
	n     int
	slots [maxSlots]*slot

	// lim are the configured limits that apply, in eachConfigured's order.
	lim []boundLimit
}

// boundLimit is one applicable limit with the total it limits.
type boundLimit struct {
	l  *Limit
	v  string
	id TotalID
	sl *slot
}

// bindShards spreads the bindings so that no lock is shared by every request.
const bindShards = 64

// maxBindingsPerShard bounds the cache: past it a shard starts afresh (its
// bindings are rebuilt on use), so memory stays bounded however many
// principals come and go.
const maxBindingsPerShard = 4096

type bindShard struct {
	mu sync.RWMutex
	m  map[Scopes]*binding
	_  [32]byte
}

// bind returns the binding of s for the periods starting at starts.
func (t *Tracker) bind(s *Scopes, starts [numPeriods]int32) *binding {
	ix := t.limits.Load()
	sh := &t.bindings[(maphash.String(t.seed, s.Key)^maphash.String(t.seed, s.Subject))%bindShards]
	sh.mu.RLock()
	b := sh.m[*s]
	sh.mu.RUnlock()
	if b != nil && b.ix == ix && b.starts == starts {
		return b
	}
	b = t.newBinding(s, ix, starts)
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= maxBindingsPerShard {
		sh.m = make(map[Scopes]*binding)
	}
	sh.m[*s] = b
	sh.mu.Unlock()
	return b
}

func (t *Tracker) newBinding(s *Scopes, ix *limitIndex, starts [numPeriods]int32) *binding {
	b := &binding{ix: ix, starts: starts}
	for sc := range numScopes {
		v := s.Value(sc)
		if sc != ScopeGlobal && v == "" {
			continue
		}
		for p := range numPeriods {
			b.slots[b.n] = t.slotFor(TotalID{Scope: sc, Value: v, Period: p, Start: starts[p]})
			b.n++
		}
	}
	eachConfigured(ix, s, func(l *Limit, v string) bool {
		id := TotalID{Scope: l.Scope, Value: v, Period: l.Period, Start: starts[l.Period]}
		b.lim = append(b.lim, boundLimit{l: l, v: v, id: id, sl: t.slotFor(id)})
		return true
	})
	return b
}

// eachBound calls f with every limit applying to s (the configured ones
// from b, then claims), the value it limits, its total and whether it came
// from claims, until f returns false. sl is nil for a claimed limit's total
// that has no slot yet (nothing spent or reserved on it).
func (t *Tracker) eachBound(b *binding, s *Scopes, claims []Limit, f func(l *Limit, v string, id TotalID, sl *slot, fromToken bool) bool) {
	for i := range b.lim {
		bl := &b.lim[i]
		if !f(bl.l, bl.v, bl.id, bl.sl, false) {
			return
		}
	}
	for i := range claims {
		if v, ok := claims[i].appliesTo(s); ok {
			id := TotalID{Scope: claims[i].Scope, Value: v, Period: claims[i].Period, Start: b.starts[claims[i].Period]}
			if !f(&claims[i], v, id, t.lookup(id), true) {
				return
			}
		}
	}
}
