package pricing

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Marshal returns t in the prices.yaml format, models sorted, amounts as
// exact decimal strings and zero fields left out, so that Parse gives back
// an equal table.
func (t *Table) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "version: %s\nprices:\n", strconv.Quote(t.Version))
	for _, m := range t.Models() {
		fmt.Fprintf(&b, "  %s: {%s}\n", strconv.Quote(m), t.prices[m].fields())
	}
	if len(t.prices) == 0 {
		b.WriteString("  {}\n")
	}
	return b.Bytes()
}

// fields is p in the flow-map syntax of a price file, without braces.
func (p Price) fields() string {
	var parts []string
	add := func(name string, v int64) {
		if v > 0 {
			parts = append(parts, name+": "+strconv.Quote(FormatUSD(v)))
		}
	}
	add("input", p.InputPerM)
	add("output", p.OutputPerM)
	add("cached_input", p.CachedInputPerM)
	add("cache_write", p.CacheWriteInputPerM)
	add("per_request", p.PerRequest)
	add("per_image", p.PerImage)
	var by []string
	p.PerImageBy.Each(func(key string, v int64) {
		by = append(by, strconv.Quote(key)+": "+strconv.Quote(FormatUSD(v)))
	})
	if len(by) > 0 {
		parts = append(parts, "per_image_by: {"+strings.Join(by, ", ")+"}")
	}
	add("per_audio_second", p.PerAudioSecond)
	add("per_1m_characters", p.CharactersPerM)
	if l := p.Long; l.AbovePromptTokens > 0 {
		long := []string{"above_prompt_tokens: " + strconv.FormatUint(l.AbovePromptTokens, 10)}
		for _, f := range []struct {
			name string
			v    int64
		}{{"input", l.InputPerM}, {"output", l.OutputPerM}, {"cached_input", l.CachedInputPerM}, {"cache_write", l.CacheWriteInputPerM}} {
			if f.v > 0 {
				long = append(long, f.name+": "+strconv.Quote(FormatUSD(f.v)))
			}
		}
		parts = append(parts, "long: {"+strings.Join(long, ", ")+"}")
	}
	var tiers []string
	for _, t := range []struct {
		name string
		p    TierPrices
	}{{"flex", p.Flex}, {"priority", p.Priority}} {
		var f []string
		for _, v := range []struct {
			name string
			v    int64
		}{{"input", t.p.InputPerM}, {"output", t.p.OutputPerM}, {"cached_input", t.p.CachedInputPerM}} {
			if v.v > 0 {
				f = append(f, v.name+": "+strconv.Quote(FormatUSD(v.v)))
			}
		}
		if len(f) > 0 {
			tiers = append(tiers, t.name+": {"+strings.Join(f, ", ")+"}")
		}
	}
	if len(tiers) > 0 {
		parts = append(parts, "tiers: {"+strings.Join(tiers, ", ")+"}")
	}
	return strings.Join(parts, ", ")
}

// String is p as a price file writes it, e.g.
// `input: "2.50", output: "10.00"`.
func (p Price) String() string { return p.fields() }

// Change is one entry of a Diff.
type Change struct {
	Model string
	// Kind is '+' (added), '-' (removed) or '~' (changed).
	Kind     byte
	Old, New Price
}

// Diff lists what turns from into to: models added, removed and changed,
// sorted by model.
func Diff(from, to *Table) []Change {
	var out []Change
	seen := map[string]bool{}
	for _, m := range from.Models() {
		seen[m] = true
		o := from.prices[m]
		n, ok := to.prices[m]
		switch {
		case !ok:
			out = append(out, Change{Model: m, Kind: '-', Old: o})
		case !n.Equal(o):
			out = append(out, Change{Model: m, Kind: '~', Old: o, New: n})
		}
	}
	for _, m := range to.Models() {
		if !seen[m] {
			out = append(out, Change{Model: m, Kind: '+', New: to.prices[m]})
		}
	}
	sortChanges(out)
	return out
}

// String is one line of a diff: "+ gpt-4o {input: ...}",
// "- old-model {...}" or "~ gpt-4o {input: "2.50" ...} -> {...}".
func (c Change) String() string {
	switch c.Kind {
	case '+':
		return fmt.Sprintf("+ %s {%s}", c.Model, c.New)
	case '-':
		return fmt.Sprintf("- %s {%s}", c.Model, c.Old)
	}
	return fmt.Sprintf("~ %s {%s} -> {%s}", c.Model, c.Old, c.New)
}

func sortChanges(cs []Change) {
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Model < cs[j].Model })
}

// NewTable builds a table of version from prices; the map is copied.
func NewTable(version string, prices map[string]Price) *Table {
	t := newTable(version, len(prices))
	for m, p := range prices {
		t.set(m, p)
	}
	return t
}

// Price returns the entry named model exactly (no prefix lookup).
func (t *Table) Price(model string) (Price, bool) {
	p, ok := t.prices[model]
	return p, ok
}
