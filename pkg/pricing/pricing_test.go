package pricing

import (
	"math"
	"strings"
	"testing"
)

func TestCost(t *testing.T) {
	mock := Price{InputPerM: 150_000_000, OutputPerM: 600_000_000, CachedInputPerM: 75_000_000}
	oneNano := Price{InputPerM: 1, OutputPerM: 1, CachedInputPerM: 1}
	const tera = 1_000_000_000_000 // 1e12
	big := Price{InputPerM: tera, OutputPerM: tera, CachedInputPerM: tera}
	tests := []struct {
		name  string
		price Price
		usage Usage
		want  int64
	}{
		{name: "zero usage", price: mock, usage: Usage{}, want: 0},
		{name: "prompt and completion", price: mock,
			usage: Usage{PromptTokens: 1000, CompletionTokens: 500}, want: 450_000},
		{name: "cached part of prompt", price: mock,
			usage: Usage{PromptTokens: 1000, CachedTokens: 400}, want: 120_000},
		{name: "cached above prompt is capped", price: mock,
			usage: Usage{PromptTokens: 100, CachedTokens: 1000}, want: 7_500},
		{name: "reasoning is inside completion", price: mock,
			usage: Usage{CompletionTokens: 1000, ReasoningTokens: 800}, want: 600_000},
		{name: "exact million", price: mock,
			usage: Usage{PromptTokens: 1_000_000}, want: 150_000_000},
		{name: "half rounds up", price: oneNano,
			usage: Usage{PromptTokens: 500_000}, want: 1},
		{name: "below half rounds down", price: oneNano,
			usage: Usage{PromptTokens: 499_999}, want: 0},
		{name: "one and a half rounds up", price: oneNano,
			usage: Usage{CompletionTokens: 1_500_000}, want: 2},
		{name: "rounded once on the sum", price: oneNano,
			usage: Usage{PromptTokens: 800_000, CachedTokens: 400_000, CompletionTokens: 400_000}, want: 1},
		{name: "per request added", price: Price{InputPerM: 1_000_000, PerRequest: 40_000_000},
			usage: Usage{PromptTokens: 3}, want: 40_000_003},
		{name: "per request only", price: Price{PerRequest: 40_000_000}, usage: Usage{}, want: 40_000_000},
		{name: "negative prices count as zero", price: Price{InputPerM: -5, OutputPerM: 1_000_000, PerRequest: -7},
			usage: Usage{PromptTokens: 10, CompletionTokens: 10}, want: 10},
		{name: "1e12 tokens at 1e12 nano per million", price: big,
			usage: Usage{PromptTokens: 2 * tera, CachedTokens: tera, CompletionTokens: tera}, want: 3_000_000_000_000_000_000},
		{name: "product above 64 bits stays exact", price: Price{InputPerM: 999_999_999_999},
			usage: Usage{PromptTokens: 999_999_999_999}, want: 999_999_999_998_000_000},
		{name: "saturates at max int64", price: Price{InputPerM: math.MaxInt64, OutputPerM: math.MaxInt64},
			usage: Usage{PromptTokens: math.MaxUint64, CompletionTokens: math.MaxUint64}, want: math.MaxInt64},
		{name: "quotient above int64 saturates", price: Price{InputPerM: math.MaxInt64},
			usage: Usage{PromptTokens: 2_000_000}, want: math.MaxInt64},
		{name: "per request overflow saturates", price: Price{InputPerM: math.MaxInt64, PerRequest: math.MaxInt64},
			usage: Usage{PromptTokens: 1_000_000}, want: math.MaxInt64},
		{name: "images times per image", price: Price{PerImage: 40_000_000, PerRequest: 1},
			usage: Usage{Images: 3}, want: 120_000_001},
		{name: "audio per second from milliseconds", price: Price{PerAudioSecond: 100_000},
			usage: Usage{AudioMillis: 12_345}, want: 1_234_500},
		{name: "audio sub-nano rounds half up", price: Price{PerAudioSecond: 1},
			usage: Usage{AudioMillis: 1_500}, want: 2},
		{name: "characters per million", price: Price{CharactersPerM: 15_000_000_000},
			usage: Usage{Characters: 1_000}, want: 15_000_000},
		{name: "units and tokens rounded once", price: Price{InputPerM: 1, CharactersPerM: 1, PerAudioSecond: 1},
			usage: Usage{PromptTokens: 200_000, Characters: 200_000, AudioMillis: 100}, want: 1},
		{name: "image overflow saturates", price: Price{PerImage: math.MaxInt64},
			usage: Usage{Images: 2}, want: math.MaxInt64},
		{name: "audio overflow saturates", price: Price{PerAudioSecond: 1},
			usage: Usage{AudioMillis: math.MaxUint64}, want: math.MaxInt64},
		{name: "unit prices ignore other units", price: Price{PerImage: 5},
			usage: Usage{AudioMillis: 1000, Characters: 1000, PromptTokens: 1000}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.price.Cost(tt.usage); got != tt.want {
				t.Errorf("Cost = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tab := &Table{Version: "t", prices: map[string]Price{
		"gpt-4":             {InputPerM: 1},
		"gpt-4o":            {InputPerM: 2},
		"gpt-4o-mini":       {InputPerM: 3},
		"claude-sonnet-4-5": {InputPerM: 4},
		"claude-sonnet-4":   {InputPerM: 5},
		"llama3":            {InputPerM: 6},
	}}
	tests := []struct {
		name   string
		model  string
		want   int64
		wantOK bool
	}{
		{name: "exact", model: "gpt-4o", want: 2, wantOK: true},
		{name: "dated variant", model: "gpt-4o-2024-08-06", want: 2, wantOK: true},
		{name: "longest prefix wins", model: "gpt-4o-mini-2024-07-18", want: 3, wantOK: true},
		{name: "no match inside a name", model: "gpt-4oo", wantOK: false},
		{name: "dot is not a boundary", model: "gpt-4.1", wantOK: false},
		{name: "vertex at sign", model: "claude-sonnet-4-5@20250929", want: 4, wantOK: true},
		{name: "dated shorter family", model: "claude-sonnet-4-20250514", want: 5, wantOK: true},
		{name: "ollama tag", model: "llama3:8b", want: 6, wantOK: true},
		{name: "case sensitive", model: "GPT-4o", wantOK: false},
		{name: "unknown", model: "mystery-model", wantOK: false},
		{name: "empty", model: "", wantOK: false},
		{name: "boundary only", model: "-", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := tab.Lookup(tt.model)
			if ok != tt.wantOK || p.InputPerM != tt.want {
				t.Errorf("Lookup(%q) = %+v, %v; want input %d, %v", tt.model, p, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestWith(t *testing.T) {
	base := &Table{Version: "2026-11-01", prices: map[string]Price{
		"gpt-4o":      {InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000},
		"gpt-4o-mini": {InputPerM: 150_000_000},
	}}
	over := map[string]Price{
		"gpt-4o":    {InputPerM: 2_000_000_000},
		"local-llm": {PerRequest: 1},
	}
	tests := []struct {
		name        string
		overrides   map[string]Price
		version     string
		wantVersion string
		model       string
		want        Price
	}{
		{name: "override replaces whole entry", overrides: over, version: "ops-1", wantVersion: "ops-1",
			model: "gpt-4o", want: Price{InputPerM: 2_000_000_000}},
		{name: "override beats prefix of dated variant", overrides: over, version: "ops-1", wantVersion: "ops-1",
			model: "gpt-4o-2024-08-06", want: Price{InputPerM: 2_000_000_000}},
		{name: "untouched entry kept", overrides: over, version: "ops-1", wantVersion: "ops-1",
			model: "gpt-4o-mini", want: Price{InputPerM: 150_000_000}},
		{name: "new entry added", overrides: over, wantVersion: "2026-11-01+override",
			model: "local-llm", want: Price{PerRequest: 1}},
		{name: "no overrides keeps version", wantVersion: "2026-11-01",
			model: "gpt-4o", want: Price{InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.With(tt.overrides, tt.version)
			if n.Version != tt.wantVersion {
				t.Errorf("Version = %q, want %q", n.Version, tt.wantVersion)
			}
			if got, _ := n.Lookup(tt.model); got != tt.want {
				t.Errorf("Lookup(%q) = %+v, want %+v", tt.model, got, tt.want)
			}
			if got, _ := base.Lookup("gpt-4o"); got.InputPerM != 2_500_000_000 {
				t.Errorf("base table changed: %+v", got)
			}
			if _, ok := base.Lookup("local-llm"); ok {
				t.Error("base table gained an entry")
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		model   string
		want    Price
		wantErr string
	}{
		{name: "quoted and unquoted decimals",
			yaml:  "version: v1\nprices:\n  m: {input: \"2.50\", output: 10, cached_input: 1.25, per_request: '0.04'}\n",
			model: "m", want: Price{InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 1_250_000_000, PerRequest: 40_000_000}},
		{name: "unit prices",
			yaml:  "version: v1\nprices:\n  m: {per_image: \"0.04\", per_audio_second: \"0.0001\", per_1m_characters: 15}\n",
			model: "m", want: Price{PerImage: 40_000_000, PerAudioSecond: 100_000, CharactersPerM: 15_000_000_000}},
		{name: "missing fields are zero", yaml: "version: v1\nprices:\n  m: {output: \"0.6\"}\n",
			model: "m", want: Price{OutputPerM: 600_000_000}},
		{name: "no prices", yaml: "version: v1\n", model: "m", want: Price{}},
		{name: "empty version", yaml: "prices:\n  m: {input: 1}\n", wantErr: "version is empty"},
		{name: "unknown field", yaml: "version: v1\nprices:\n  m: {inptu: 1}\n", wantErr: "not found"},
		{name: "unknown top-level key", yaml: "version: v1\nmodels: {}\n", wantErr: "not found"},
		{name: "negative", yaml: "version: v1\nprices:\n  m: {input: -1}\n", wantErr: "non-negative"},
		{name: "ten decimals", yaml: "version: v1\nprices:\n  m: {input: 0.0000000001}\n", wantErr: "9 fractional"},
		{name: "exponent", yaml: "version: v1\nprices:\n  m: {input: 1e-3}\n", wantErr: "decimal"},
		{name: "boolean", yaml: "version: v1\nprices:\n  m: {input: true}\n", wantErr: "want a decimal"},
		{name: "not a scalar", yaml: "version: v1\nprices:\n  m: {input: [1]}\n", wantErr: "want a decimal"},
		{name: "empty model name", yaml: "version: v1\nprices:\n  \"\": {input: 1}\n", wantErr: "empty model"},
		{name: "not yaml", yaml: "version: [\n", wantErr: "parse price table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got, _ := tab.Lookup(tt.model); got != tt.want {
				t.Errorf("Lookup(%q) = %+v, want %+v", tt.model, got, tt.want)
			}
		})
	}
}

func TestParsePrice(t *testing.T) {
	tests := []struct {
		name                              string
		input, output, cached, perRequest string
		want                              Price
		wantErr                           string
	}{
		{name: "all set", input: "2.50", output: "10", cached: "1.25", perRequest: "0.01",
			want: Price{InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 1_250_000_000, PerRequest: 10_000_000}},
		{name: "empty is zero", output: "0.60", want: Price{OutputPerM: 600_000_000}},
		{name: "bad field named", input: "1", cached: "-1", wantErr: "cached_input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePrice(tt.input, tt.output, tt.cached, tt.perRequest)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePrice error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParsePrice = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestWithUnits(t *testing.T) {
	tests := []struct {
		name                string
		image, audio, chars string
		want                Price
		wantErr             string
	}{
		{name: "all set", image: "0.04", audio: "0.0001", chars: "15",
			want: Price{InputPerM: 1, PerImage: 40_000_000, PerAudioSecond: 100_000, CharactersPerM: 15_000_000_000}},
		{name: "empty keeps zero", want: Price{InputPerM: 1}},
		{name: "bad field named", audio: "0.1.2", wantErr: "per_audio_second"},
		{name: "too fine", chars: "0.0000000001", wantErr: "per_1m_characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Price{InputPerM: 1}.WithUnits(tt.image, tt.audio, tt.chars)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("WithUnits error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("WithUnits = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	tab := Default()
	if tab != Default() {
		t.Error("Default returned different tables")
	}
	if tab.Version == "" {
		t.Error("embedded table has no version")
	}
	tests := []struct {
		name  string
		model string
		want  Price // zero: only require an entry
	}{
		{name: "mock-gpt", model: "mock-gpt", want: Price{InputPerM: 150_000_000, OutputPerM: 600_000_000, CachedInputPerM: 75_000_000}},
		{name: "mock-embed", model: "mock-embed", want: Price{InputPerM: 20_000_000}},
		{name: "gpt-4o", model: "gpt-4o", want: Price{InputPerM: 2_500_000_000, OutputPerM: 10_000_000_000, CachedInputPerM: 1_250_000_000}},
		{name: "gpt-4o dated", model: "gpt-4o-2024-08-06"},
		{name: "gpt-4o-mini", model: "gpt-4o-mini"},
		{name: "gpt-4.1", model: "gpt-4.1"},
		{name: "gpt-4.1-mini", model: "gpt-4.1-mini"},
		{name: "gpt-4.1-nano", model: "gpt-4.1-nano"},
		{name: "o3", model: "o3"},
		{name: "o4-mini", model: "o4-mini"},
		{name: "gpt-5", model: "gpt-5"},
		{name: "gpt-5-mini", model: "gpt-5-mini"},
		{name: "gpt-5-nano", model: "gpt-5-nano"},
		{name: "text-embedding-3-small", model: "text-embedding-3-small"},
		{name: "text-embedding-3-large", model: "text-embedding-3-large"},
		{name: "claude opus 4.1 dated", model: "claude-opus-4-1-20250805"},
		{name: "claude opus 4.5", model: "claude-opus-4-5"},
		{name: "claude sonnet 4.5 dated", model: "claude-sonnet-4-5-20250929"},
		{name: "claude sonnet 4 dated", model: "claude-sonnet-4-20250514"},
		{name: "claude haiku 4.5", model: "claude-haiku-4-5"},
		{name: "claude 3.5 haiku dated", model: "claude-3-5-haiku-20241022"},
		{name: "gemini 2.5 pro", model: "gemini-2.5-pro"},
		{name: "gemini 2.5 flash", model: "gemini-2.5-flash"},
		{name: "gemini 2.5 flash-lite", model: "gemini-2.5-flash-lite"},
		{name: "mistral large", model: "mistral-large-latest"},
		{name: "mistral medium", model: "mistral-medium-2505"},
		{name: "mistral small", model: "mistral-small-latest"},
		{name: "codestral", model: "codestral-latest"},
		{name: "deepseek chat", model: "deepseek-chat"},
		{name: "deepseek reasoner", model: "deepseek-reasoner"},
		{name: "dall-e-3", model: "dall-e-3"},
		{name: "whisper-1", model: "whisper-1", want: Price{PerAudioSecond: 100_000}},
		{name: "tts-1", model: "tts-1", want: Price{CharactersPerM: 15_000_000_000}},
		{name: "mock-image", model: "mock-image"},
		{name: "mock-whisper", model: "mock-whisper", want: Price{PerAudioSecond: 100_000}},
		{name: "mock-tts", model: "mock-tts", want: Price{CharactersPerM: 15_000_000_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := tab.Lookup(tt.model)
			if !ok {
				t.Fatalf("no price for %s", tt.model)
			}
			if tt.want != (Price{}) && p != tt.want {
				t.Errorf("Lookup(%q) = %+v, want %+v", tt.model, p, tt.want)
			}
		})
	}
	t.Run("entries are sane", func(t *testing.T) {
		for _, m := range tab.Models() {
			p, _ := tab.Lookup(m)
			if p == (Price{}) {
				t.Errorf("%s has no price", m)
			}
			if p.CachedInputPerM > p.InputPerM {
				t.Errorf("%s: cached input %d above input %d", m, p.CachedInputPerM, p.InputPerM)
			}
		}
	})
}

func TestLookupCostAllocs(t *testing.T) {
	tab := Default()
	u := Usage{PromptTokens: 1200, CompletionTokens: 300, CachedTokens: 1024}
	allocs := testing.AllocsPerRun(100, func() {
		p, _ := tab.Lookup("gpt-4o-2024-08-06")
		_ = p.Cost(u)
	})
	if allocs != 0 {
		t.Errorf("Lookup+Cost allocates %.0f times, want 0", allocs)
	}
}

// BenchmarkLookupCost prices one request on the hot path; expect 0 allocs/op.
func BenchmarkLookupCost(b *testing.B) {
	tests := []struct {
		name  string
		model string
	}{
		{name: "exact", model: "gpt-4o-mini"},
		{name: "dated", model: "claude-sonnet-4-5-20250929"},
	}
	tab := Default()
	u := Usage{PromptTokens: 1200, CompletionTokens: 300, CachedTokens: 1024}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			var sum int64
			for b.Loop() {
				p, _ := tab.Lookup(tt.model)
				sum += p.Cost(u)
			}
			if sum <= 0 {
				b.Fatal("no cost")
			}
		})
	}
}
