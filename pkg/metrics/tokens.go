package metrics

import (
	"hash/maphash"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// usageShards is the number of shards of the (dept, model) cache; a power
// of two.
const usageShards = 16

// usageKey identifies the token and cost children of one dept and model.
type usageKey struct{ dept, model string }

// usageChildren are the counters Tokens adds to for one dept and model.
type usageChildren struct {
	prompt, completion, cached, reasoning, cost prometheus.Counter
}

// usageShard is one slice of the cache; mu guards m.
type usageShard struct {
	mu sync.RWMutex
	m  map[usageKey]*usageChildren
	_  [40]byte // keep shards on separate cache lines
}

// Tokens adds one request's token counts and cost, in nano-USD, to the
// counters of dept and model. Zero counts add nothing; a negative cost is
// ignored (counters only go up). Once a (dept, model) pair has been seen it
// takes a shard read lock and a map lookup and does not allocate. Depts past
// Options.MaxDepts are counted under OtherDept.
func (g *Gateway) Tokens(dept, model string, prompt, completion, cached, reasoning uint64, costNano int64) {
	c := g.usage(dept, model)
	add := func(c prometheus.Counter, n uint64) {
		if n > 0 {
			c.Add(float64(n))
		}
	}
	add(c.prompt, prompt)
	add(c.completion, completion)
	add(c.cached, cached)
	add(c.reasoning, reasoning)
	if costNano > 0 {
		c.cost.Add(float64(costNano))
	}
}

// usage returns the children of (dept, model), creating them on first use.
func (g *Gateway) usage(dept, model string) *usageChildren {
	k := usageKey{dept, model}
	sh := &g.shards[maphash.String(g.seed, dept)&(usageShards-1)]
	sh.mu.RLock()
	c := sh.m[k]
	sh.mu.RUnlock()
	if c != nil {
		return c
	}
	label, admitted := g.admitDept(dept)
	if !admitted {
		// Not cached under the dept's own name, so that depts past the cap
		// cannot grow the cache either.
		k = usageKey{OtherDept, model}
		sh = &g.shards[maphash.String(g.seed, OtherDept)&(usageShards-1)]
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c = sh.m[k]; c != nil {
		return c
	}
	k = usageKey{label, labelValue(model)}
	dir := func(d string) prometheus.Counter { return g.tokens.WithLabelValues(k.dept, k.model, d) }
	c = &usageChildren{
		prompt:     dir("prompt"),
		completion: dir("completion"),
		cached:     dir("cached"),
		reasoning:  dir("reasoning"),
		cost:       g.cost.WithLabelValues(k.dept, k.model),
	}
	sh.m[k] = c
	return c
}

// admitDept returns the label to count dept under: dept itself while fewer
// than maxDepts distinct depts have been admitted (admitted true), else
// OtherDept.
func (g *Gateway) admitDept(dept string) (label string, admitted bool) {
	g.deptsMu.Lock()
	defer g.deptsMu.Unlock()
	if _, ok := g.depts[dept]; ok {
		return dept, true
	}
	if len(g.depts) >= g.maxDepts {
		return OtherDept, false
	}
	dept = labelValue(dept)
	g.depts[dept] = struct{}{}
	return dept, true
}
