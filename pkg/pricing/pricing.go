// Package pricing holds Tollgate's model price table and turns token counts
// into cost. Money is integer nano-USD (1e-9 USD) throughout: prices are
// parsed from decimal text without floating point and costs are computed
// with 128-bit integer arithmetic.
package pricing

import (
	"bytes"
	_ "embed"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Price is what one model costs. Token prices are nano-USD per million
// tokens (2_500_000_000 is $2.50 per million); PerRequest is nano-USD per
// call, for endpoints billed by the call. The unit prices serve the
// endpoints that are not billed by tokens: PerImage is nano-USD per
// generated image (at the provider's default size and quality, and at any
// PerImageBy does not list; ImagePrice picks), PerAudioSecond nano-USD per
// second of audio transcribed or translated, and CharactersPerM nano-USD
// per million input characters of speech synthesis. Negative fields count
// as zero. PerImageBy is shared, never modified: a Price stays comparable
// with == (two equal image tables built apart compare unequal).
//
// CacheWriteInputPerM is the price of prompt tokens written to the
// provider's prompt cache (Anthropic's cache_creation_input_tokens); zero
// bills them at InputPerM. Long is the price above a prompt size (Gemini
// and Anthropic long context: a request whose prompt exceeds
// Long.AbovePromptTokens is billed whole at the Long prices). Flex and
// Priority are the token prices of a request the provider answered at that
// service tier (OpenAI service_tier flex, priority); a zero one keeps the
// base prices.
type Price struct {
	InputPerM           int64
	OutputPerM          int64
	CachedInputPerM     int64
	CacheWriteInputPerM int64
	PerRequest          int64
	PerImage            int64
	PerImageBy          *ImagePrices
	PerAudioSecond      int64
	CharactersPerM      int64
	Long                Tier
	Flex, Priority      TierPrices
}

// TierPrices are the token prices of a service tier, nano-USD per million
// tokens; a zero field keeps the base price.
type TierPrices struct {
	InputPerM       int64
	OutputPerM      int64
	CachedInputPerM int64
}

// ServiceTier is the service tier a provider reports it answered at
// (OpenAI's service_tier). The zero value is the standard tier.
type ServiceTier uint8

// Service tiers with a price of their own.
const (
	TierStandard ServiceTier = iota // "default", "auto", "scale" or none reported
	TierFlex                        // "flex"
	TierPriority                    // "priority"
)

// ParseServiceTier maps a provider's service_tier value to a ServiceTier:
// "flex" and "priority" to theirs, anything else to TierStandard.
func ParseServiceTier(s string) ServiceTier {
	switch s {
	case "flex":
		return TierFlex
	case "priority":
		return TierPriority
	}
	return TierStandard
}

// String is the tier's name as usage events record it: "flex",
// "priority", or "" for the standard tier.
func (t ServiceTier) String() string {
	switch t {
	case TierFlex:
		return "flex"
	case TierPriority:
		return "priority"
	}
	return ""
}

// Tier is a price tier above a prompt size: a request with more than
// AbovePromptTokens prompt tokens pays these token prices (nano-USD per
// million) for all its tokens; a zero field keeps the base price. A zero
// AbovePromptTokens means no tier.
type Tier struct {
	AbovePromptTokens   uint64
	InputPerM           int64
	OutputPerM          int64
	CachedInputPerM     int64
	CacheWriteInputPerM int64
}

// Usage is the token count of one request, in OpenAI semantics:
// CachedTokens is the part of PromptTokens read from the provider's prompt
// cache, CacheWriteTokens the part written to it, and ReasoningTokens is the
// part of CompletionTokens spent on hidden reasoning.
//
// Images, AudioMillis and Characters are the units of the endpoints billed
// by unit: images generated, milliseconds of audio processed and
// characters (Unicode code points) of speech input. ServiceTier is the tier
// the provider answered at.
type Usage struct {
	PromptTokens     uint64
	CompletionTokens uint64
	CachedTokens     uint64
	CacheWriteTokens uint64
	ReasoningTokens  uint64
	Images           uint64
	AudioMillis      uint64
	Characters       uint64
	ServiceTier      ServiceTier
}

// Cost returns the cost of u at price p in nano-USD:
//
//	((prompt-cached-written)*InputPerM + cached*CachedInputPerM
//	  + written*CacheWriteInputPerM + completion*OutputPerM
//	  + characters*CharactersPerM + audioMillis*PerAudioSecond*1000) / 1e6
//	+ images*PerImage + PerRequest
//
// with the token prices of u's service tier when p has them (Flex,
// Priority), else the Long tier's when the prompt is above its size.
// The division rounds half up and is done once, on the exact 128-bit sum,
// so no sub-nano amount is lost per term. ReasoningTokens are not added:
// they are already part of CompletionTokens and billed at the output price.
// CachedTokens above PromptTokens are capped at PromptTokens, and
// CacheWriteTokens at what is left of them. A result above
// math.MaxInt64 saturates there; at 1e12 tokens per kind and 1e12 nano-USD
// per million tokens ($1000) the result is still exact.
func (p Price) Cost(u Usage) int64 {
	in, out, cachedIn, writeIn := p.tokenPrices(u.PromptTokens, u.ServiceTier)
	cached := min(u.CachedTokens, u.PromptTokens)
	written := min(u.CacheWriteTokens, u.PromptTokens-cached)
	var s sum128
	s.addMul(u.PromptTokens-cached-written, in)
	s.addMul(cached, cachedIn)
	s.addMul(written, writeIn)
	s.addMul(u.CompletionTokens, out)
	s.addMul(u.Characters, p.CharactersPerM)
	if u.AudioMillis > math.MaxUint64/1000 {
		return math.MaxInt64
	}
	s.addMul(u.AudioMillis*1000, p.PerAudioSecond) // per second = per 1000 ms = 1e6/1000
	s.addMul(1, 500_000)                           // round half up
	if s.over || s.hi >= 1_000_000 {
		return math.MaxInt64
	}
	q, _ := bits.Div64(s.hi, s.lo, 1_000_000)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	cost := int64(q)
	if p.PerImage > 0 && u.Images > 0 {
		hi, lo := bits.Mul64(u.Images, uint64(p.PerImage))
		if hi != 0 || lo > math.MaxInt64 {
			return math.MaxInt64
		}
		cost = addSat(cost, int64(lo))
	}
	if p.PerRequest > 0 {
		cost = addSat(cost, p.PerRequest)
	}
	return cost
}

// tokenPrices returns the input, output, cached-input and cache-write
// prices of a request with prompt tokens answered at tier: the service
// tier's where p has one, else the Long tier's where it applies (a zero
// tier field keeps the base price), cache writes at the input price when
// they have none.
func (p *Price) tokenPrices(prompt uint64, tier ServiceTier) (in, out, cachedIn, writeIn int64) {
	in, out, cachedIn, writeIn = p.InputPerM, p.OutputPerM, p.CachedInputPerM, p.CacheWriteInputPerM
	st := &p.Flex
	if tier == TierPriority {
		st = &p.Priority
	}
	if tier != TierStandard && *st != (TierPrices{}) {
		in, out, cachedIn = orBase(st.InputPerM, in), orBase(st.OutputPerM, out), orBase(st.CachedInputPerM, cachedIn)
	} else if t := &p.Long; t.AbovePromptTokens > 0 && prompt > t.AbovePromptTokens {
		in, out = orBase(t.InputPerM, in), orBase(t.OutputPerM, out)
		cachedIn, writeIn = orBase(t.CachedInputPerM, cachedIn), orBase(t.CacheWriteInputPerM, writeIn)
	}
	if writeIn <= 0 {
		writeIn = in
	}
	return in, out, cachedIn, writeIn
}

// Effective returns the prices a request with prompt tokens answered at
// tier pays, without tiers: the service tier's token prices when p has
// them, else the Long tier's when the prompt is above its size, and
// CacheWriteInputPerM set to the input price when p has none. For any usage
// u with u.PromptTokens == prompt and u.ServiceTier == tier,
// p.Cost(u) == p.Effective(prompt, tier).Cost(u).
func (p Price) Effective(prompt uint64, tier ServiceTier) Price {
	e := p
	e.InputPerM, e.OutputPerM, e.CachedInputPerM, e.CacheWriteInputPerM = p.tokenPrices(prompt, tier)
	e.Long, e.Flex, e.Priority = Tier{}, TierPrices{}, TierPrices{}
	return e
}

// orBase returns tier unless it is zero or negative, then base.
func orBase(tier, base int64) int64 {
	if tier > 0 {
		return tier
	}
	return base
}

// addSat adds two non-negative amounts, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sum128 is an unsigned 128-bit accumulator; over records a carry out of
// the top word.
type sum128 struct {
	hi, lo uint64
	over   bool
}

// addMul adds n*price to s; a non-positive price adds nothing.
func (s *sum128) addMul(n uint64, price int64) {
	if price <= 0 || n == 0 {
		return
	}
	h, l := bits.Mul64(n, uint64(price))
	var c uint64
	s.lo, c = bits.Add64(s.lo, l, 0)
	s.hi, c = bits.Add64(s.hi, h, c)
	if c != 0 {
		s.over = true
	}
}

// Table is a versioned set of model prices. A Table is never modified after
// it is built, so it is safe for concurrent use; With returns a new one.
type Table struct {
	// Version names the price list, e.g. "2026-11-01"; usage events record
	// it so costs can be traced to the prices used.
	Version string
	prices  map[string]Price
	// slashed is true when an entry's name holds a '/', so that LookupAt
	// skips its map lookups for tables without provider entries.
	slashed bool
}

// newTable returns an empty table of version with room for n entries.
func newTable(version string, n int) *Table {
	return &Table{Version: version, prices: make(map[string]Price, n)}
}

// set adds or replaces the entry name.
func (t *Table) set(name string, p Price) {
	t.prices[name] = p
	if strings.IndexByte(name, '/') >= 0 {
		t.slashed = true
	}
}

//go:embed prices.yaml
var embedded []byte

// defaultTable parses the embedded table on first use.
var defaultTable = sync.OnceValue(func() *Table {
	t, err := Parse(embedded)
	if err != nil {
		panic(fmt.Sprintf("pricing: embedded prices.yaml: %v", err)) // a test keeps this unreachable
	}
	return t
})

// Default returns the embedded price table (prices.yaml), parsed on first
// use. Every call returns the same *Table.
func Default() *Table { return defaultTable() }

// file is the YAML layout shared by prices.yaml, re-pricing files and
// config: a version and, per model, decimal USD per million tokens.
type file struct {
	Version string               `yaml:"version"`
	Prices  map[string]fileEntry `yaml:"prices"`
}

// fileEntry is one model's prices as decimals in USD (per million tokens,
// per_request per call, per_image per image, per_audio_second per second,
// per_1m_characters per million characters); a missing field is zero.
type fileEntry struct {
	Input           usd            `yaml:"input"`
	Output          usd            `yaml:"output"`
	CachedInput     usd            `yaml:"cached_input"`
	CacheWrite      usd            `yaml:"cache_write"`
	PerRequest      usd            `yaml:"per_request"`
	PerImage        usd            `yaml:"per_image"`
	PerImageBy      map[string]usd `yaml:"per_image_by"`
	PerAudioSecond  usd            `yaml:"per_audio_second"`
	Per1MCharacters usd            `yaml:"per_1m_characters"`
	Long            *fileTier      `yaml:"long"`
	Tiers           *fileTiers     `yaml:"tiers"`
}

// fileTiers are the service tiers' prices in a price file.
type fileTiers struct {
	Flex     *fileTierPrices `yaml:"flex"`
	Priority *fileTierPrices `yaml:"priority"`
}

// fileTierPrices are one service tier's token prices, decimal USD per
// million tokens.
type fileTierPrices struct {
	Input       usd `yaml:"input"`
	Output      usd `yaml:"output"`
	CachedInput usd `yaml:"cached_input"`
}

// prices is f as TierPrices; nil is zero.
func (f *fileTierPrices) prices() TierPrices {
	if f == nil {
		return TierPrices{}
	}
	return TierPrices{InputPerM: int64(f.Input), OutputPerM: int64(f.Output), CachedInputPerM: int64(f.CachedInput)}
}

// fileTier is a Tier in a price file: the prompt size above which it
// applies and its token prices, decimal USD per million tokens.
type fileTier struct {
	AbovePromptTokens uint64 `yaml:"above_prompt_tokens"`
	Input             usd    `yaml:"input"`
	Output            usd    `yaml:"output"`
	CachedInput       usd    `yaml:"cached_input"`
	CacheWrite        usd    `yaml:"cache_write"`
}

// usd is a decimal USD amount in nano-USD, read from the scalar's text so
// that an unquoted 2.50 is never a float.
type usd int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (u *usd) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a decimal amount", n.Line)
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float":
	default:
		return fmt.Errorf("line %d: want a decimal amount, got %q", n.Line, n.Value)
	}
	v, err := ParseUSD(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*u = usd(v)
	return nil
}

// Parse reads a price table in the prices.yaml format:
//
//	version: "2026-11-01"
//	prices:
//	  gpt-4o: {input: "2.50", output: "10.00", cached_input: "1.25"}
//	  dall-e-3: {per_image: "0.04", per_image_by: {"*/1024x1792": "0.08", "hd/*": "0.08", "hd/1024x1792": "0.12"}}
//	  whisper-1: {per_audio_second: "0.0001"}
//	  tts-1: {per_1m_characters: "15.00"}
//	  claude-sonnet-4-5: {input: "3.00", output: "15.00", cached_input: "0.30", cache_write: "3.75",
//	    long: {above_prompt_tokens: 200000, input: "6.00", output: "22.50", cached_input: "0.60", cache_write: "7.50"}}
//	  gpt-5: {input: "1.25", output: "10.00", tiers: {flex: {input: "0.625", output: "5.00"}, priority: {input: "2.50", output: "20.00"}}}
//
// Amounts are decimal USD, per million tokens for input, output,
// cached_input and cache_write (and the long tier's), per call for per_request, per image for per_image
// and the per_image_by entries (keyed "quality/size", "*" for any one of
// them; see Price.ImagePrice), per
// second of audio for per_audio_second and per million characters for
// per_1m_characters. A long tier needs above_prompt_tokens. tiers holds
// the flex and priority service tiers' input, output and cached_input
// prices. Unknown keys,
// an empty version or model name, negative amounts and more than nine
// decimals are errors.
func Parse(data []byte) (*Table, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse price table: %w", err)
	}
	if f.Version == "" {
		return nil, fmt.Errorf("parse price table: version is empty")
	}
	t := newTable(f.Version, len(f.Prices))
	for model, e := range f.Prices {
		if model == "" {
			return nil, fmt.Errorf("parse price table: empty model name")
		}
		p := Price{
			InputPerM:           int64(e.Input),
			OutputPerM:          int64(e.Output),
			CachedInputPerM:     int64(e.CachedInput),
			CacheWriteInputPerM: int64(e.CacheWrite),
			PerRequest:          int64(e.PerRequest),
			PerImage:            int64(e.PerImage),
			PerAudioSecond:      int64(e.PerAudioSecond),
			CharactersPerM:      int64(e.Per1MCharacters),
		}
		if len(e.PerImageBy) > 0 {
			nano := make(map[string]int64, len(e.PerImageBy))
			for k, v := range e.PerImageBy {
				nano[k] = int64(v)
			}
			ip, err := newImagePrices(nano)
			if err != nil {
				return nil, fmt.Errorf("parse price table: %s: %w", model, err)
			}
			p.PerImageBy = ip
		}
		if l := e.Long; l != nil {
			if l.AbovePromptTokens == 0 {
				return nil, fmt.Errorf("parse price table: %s: long tier without above_prompt_tokens", model)
			}
			p.Long = Tier{AbovePromptTokens: l.AbovePromptTokens, InputPerM: int64(l.Input), OutputPerM: int64(l.Output),
				CachedInputPerM: int64(l.CachedInput), CacheWriteInputPerM: int64(l.CacheWrite)}
		}
		if ts := e.Tiers; ts != nil {
			p.Flex, p.Priority = ts.Flex.prices(), ts.Priority.prices()
		}
		t.set(model, p)
	}
	return t, nil
}

// ParsePrice builds a Price from decimal USD strings as found in config:
// input, output and cachedInput per million tokens, perRequest per call. An
// empty string is zero.
func ParsePrice(input, output, cachedInput, perRequest string) (Price, error) {
	var p Price
	err := parseAmounts([]amount{
		{"input", input, &p.InputPerM},
		{"output", output, &p.OutputPerM},
		{"cached_input", cachedInput, &p.CachedInputPerM},
		{"per_request", perRequest, &p.PerRequest},
	})
	return p, err
}

// WithUnits returns p with the unit prices set from decimal USD strings as
// found in config: perImage per generated image, perAudioSecond per second
// of audio, per1MCharacters per million characters. An empty string keeps
// the field zero.
func (p Price) WithUnits(perImage, perAudioSecond, per1MCharacters string) (Price, error) {
	err := parseAmounts([]amount{
		{"per_image", perImage, &p.PerImage},
		{"per_audio_second", perAudioSecond, &p.PerAudioSecond},
		{"per_1m_characters", per1MCharacters, &p.CharactersPerM},
	})
	if err != nil {
		return Price{}, err
	}
	return p, nil
}

// WithCacheWrite returns p with CacheWriteInputPerM set from a decimal USD
// string per million tokens, as found in config (cache_write). An empty
// string keeps it zero: cache writes then cost the input price.
func (p Price) WithCacheWrite(cacheWrite string) (Price, error) {
	if err := parseAmounts([]amount{{"cache_write", cacheWrite, &p.CacheWriteInputPerM}}); err != nil {
		return Price{}, err
	}
	return p, nil
}

// WithServiceTier returns p with the token prices of a service tier
// ("flex" or "priority") as found in config (tiers), decimal USD per
// million tokens; an empty string keeps the base price. Another tier name
// is an error.
func (p Price) WithServiceTier(tier, input, output, cachedInput string) (Price, error) {
	var dst *TierPrices
	switch ParseServiceTier(tier) {
	case TierFlex:
		dst = &p.Flex
	case TierPriority:
		dst = &p.Priority
	default:
		return Price{}, fmt.Errorf("tiers: unknown service tier %q (want flex or priority)", tier)
	}
	err := parseAmounts([]amount{
		{"tiers." + tier + ".input", input, &dst.InputPerM},
		{"tiers." + tier + ".output", output, &dst.OutputPerM},
		{"tiers." + tier + ".cached_input", cachedInput, &dst.CachedInputPerM},
	})
	if err != nil {
		return Price{}, err
	}
	return p, nil
}

// WithLong returns p with a long-context tier as found in config (long):
// above prompt tokens, the token prices from decimal USD strings per
// million tokens; an empty string keeps the base price. A zero above is an
// error, since a tier needs a size to start at.
func (p Price) WithLong(above uint64, input, output, cachedInput, cacheWrite string) (Price, error) {
	if above == 0 {
		return Price{}, fmt.Errorf("long: above_prompt_tokens must be set and above 0")
	}
	t := Tier{AbovePromptTokens: above}
	err := parseAmounts([]amount{
		{"long.input", input, &t.InputPerM},
		{"long.output", output, &t.OutputPerM},
		{"long.cached_input", cachedInput, &t.CachedInputPerM},
		{"long.cache_write", cacheWrite, &t.CacheWriteInputPerM},
	})
	if err != nil {
		return Price{}, err
	}
	p.Long = t
	return p, nil
}

// amount is one decimal USD field of a config price and where it goes.
type amount struct {
	name string
	text string
	dst  *int64
}

// parseAmounts parses each non-empty amount into its destination.
func parseAmounts(as []amount) error {
	for _, f := range as {
		if f.text == "" {
			continue
		}
		v, err := ParseUSD(f.text)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = v
	}
	return nil
}

// With returns a new table holding t's prices with overrides applied: an
// override replaces the model's whole entry (fields it leaves zero are
// free) or adds a model. version names the result; when empty, it is t's
// version followed by "+override" (or t's version if there are no
// overrides). t is not changed.
func (t *Table) With(overrides map[string]Price, version string) *Table {
	if version == "" {
		version = t.Version
		if len(overrides) > 0 {
			version += "+override"
		}
	}
	n := newTable(version, len(t.prices)+len(overrides))
	for m, p := range t.prices {
		n.set(m, p)
	}
	for m, p := range overrides {
		n.set(m, p)
	}
	return n
}

// Lookup returns the price of model: the entry with exactly that name, else
// the entry with the longest name that is a prefix of model followed by one
// of '-', '@', ':', '/' or '_', so "gpt-4o-2024-08-06" and
// "claude-sonnet-4-5@20250929" find "gpt-4o" and "claude-sonnet-4-5", while
// "gpt-4o" never matches an entry "gpt-4". Names are case-sensitive. It does
// not allocate.
func (t *Table) Lookup(model string) (Price, bool) {
	if p, ok := t.prices[model]; ok {
		return p, true
	}
	for i := len(model) - 1; i > 0; i-- {
		switch model[i] {
		case '-', '@', ':', '/', '_':
			if p, ok := t.prices[model[:i]]; ok {
				return p, true
			}
		}
	}
	return Price{}, false
}

// LookupAt returns the price of a model as one provider serves it: the
// entry named served, which is the provider's name, '/' and the model
// ("azure-eu/gpt-4o"), exactly or by the longest prefix as Lookup finds
// one, never shorter than the provider's name, '/' and one byte. It reports
// false when served does not start with provider and '/', or no such entry
// exists; callers then look the model up alone. served is built once per
// route by the caller, so that the lookup does not allocate.
func (t *Table) LookupAt(provider, served string) (Price, bool) {
	n := len(provider) + 1
	if !t.slashed || len(served) <= n || served[n-1] != '/' || served[:n-1] != provider {
		return Price{}, false
	}
	if p, ok := t.prices[served]; ok {
		return p, true
	}
	for i := len(served) - 1; i > n; i-- {
		switch served[i] {
		case '-', '@', ':', '/', '_':
			if p, ok := t.prices[served[:i]]; ok {
				return p, true
			}
		}
	}
	return Price{}, false
}

// Models returns the names of all entries, sorted.
func (t *Table) Models() []string {
	names := make([]string, 0, len(t.prices))
	for m := range t.prices {
		names = append(names, m)
	}
	sort.Strings(names)
	return names
}
