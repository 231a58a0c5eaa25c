package billing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// fakeStore answers one request id.
type fakeStore struct {
	id  string
	err error
}

func (f fakeStore) Charge(_ context.Context, id string, _ ...*pricing.Table) (*Charge, error) {
	switch {
	case f.err != nil:
		return nil, f.err
	case id == f.id:
		return &Charge{RequestID: id}, nil
	default:
		return nil, fmt.Errorf("%w %s", ErrNotFound, id)
	}
}

func TestLookup(t *testing.T) {
	down := errors.New("connection refused")
	tests := []struct {
		name      string
		store     Store
		id        string
		wantFound bool
		wantErr   error
	}{
		{"found", fakeStore{id: "r1"}, "r1", true, nil},
		{"not found is no error", fakeStore{id: "r1"}, "r2", false, nil},
		{"store error", fakeStore{err: down}, "r1", false, down},
		{"no source", nil, "r1", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Explainer{Store: tt.store}
			v, found, err := e.Lookup(context.Background(), tt.id)
			if found != tt.wantFound {
				t.Fatalf("found = %v, want %v", found, tt.wantFound)
			}
			if tt.store == nil {
				if err == nil {
					t.Fatal("no source configured: want an error")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if c, _ := v.(*Charge); found && (c == nil || c.RequestID != tt.id) {
				t.Fatalf("value = %#v", v)
			}
		})
	}
}

func TestBreakDown(t *testing.T) {
	sonnet := pricing.Price{InputPerM: 3e9, OutputPerM: 15e9, CachedInputPerM: 3e8, CacheWriteInputPerM: 375e7,
		Long: pricing.Tier{AbovePromptTokens: 200_000, InputPerM: 6e9, OutputPerM: 225e8, CachedInputPerM: 6e8, CacheWriteInputPerM: 75e8}}
	bedrock := pricing.Price{InputPerM: 33e8, OutputPerM: 165e8, CacheWriteInputPerM: 4125e6}
	sonnet.Priority = pricing.TierPrices{InputPerM: 5e9, OutputPerM: 25e9}
	book := pricing.NewTable("book-1", map[string]pricing.Price{"claude-sonnet-4-5": sonnet, "bedrock-us/claude-sonnet-4-5": bedrock})
	tests := []struct {
		name                     string
		provider, tier           string
		prompt, cached, written  uint64
		version                  string
		wantKnown                bool
		wantPrice                pricing.Price
		wantIn, wantCW, wantText string
	}{
		{name: "cache writes", provider: "claude", prompt: 10_000, cached: 2_000, written: 5_000, version: "book-1", wantKnown: true,
			wantPrice: sonnet, wantIn: "$0.009", wantCW: "$0.01875", wantText: "$3.75 cache write"},
		{name: "long context", provider: "claude", prompt: 300_000, written: 100_000, version: "book-1", wantKnown: true,
			wantPrice: sonnet, wantIn: "$1.20", wantCW: "$0.75", wantText: "long context: prompt above 200000 tokens"},
		{name: "provider entry", provider: "bedrock-us", prompt: 1_000, written: 1_000, version: "book-1", wantKnown: true,
			wantPrice: bedrock, wantIn: "$0.00", wantCW: "$0.004125", wantText: "$4.125 cache write"},
		{name: "service tier", provider: "claude", tier: "priority", prompt: 1_000, version: "book-1", wantKnown: true,
			wantPrice: sonnet, wantIn: "$0.005", wantCW: "$0.00", wantText: "$5.00 in, $0.30 cached in, $3.75 cache write, $25.00 out per million tokens (service tier priority)"},
		{name: "unknown version", provider: "claude", prompt: 1, version: "book-2", wantText: "book-2 is not the embedded one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Charge{Provider: tt.provider, Deployment: tt.provider + "/claude-sonnet-4-5", ServedModel: "claude-sonnet-4-5",
				PromptTokens: tt.prompt, CachedTokens: tt.cached, CacheWriteTokens: tt.written, CompletionTokens: 100,
				PricingVersion: tt.version, ServiceTier: tt.tier}
			p, _ := book.LookupAt(tt.provider, c.Deployment)
			if p == (pricing.Price{}) {
				p, _ = book.Lookup(c.ServedModel)
			}
			c.CostNano = p.Cost(pricing.Usage{PromptTokens: tt.prompt, CachedTokens: tt.cached, CacheWriteTokens: tt.written, CompletionTokens: 100,
				ServiceTier: pricing.ParseServiceTier(tt.tier)})
			c.BreakDown(book)
			if c.PriceKnown != tt.wantKnown {
				t.Fatalf("PriceKnown = %v, want %v", c.PriceKnown, tt.wantKnown)
			}
			var out strings.Builder
			if err := c.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tt.wantText) {
				t.Errorf("output lacks %q:\n%s", tt.wantText, out.String())
			}
			if !tt.wantKnown {
				return
			}
			if c.Price != tt.wantPrice {
				t.Errorf("price %+v, want %+v", c.Price, tt.wantPrice)
			}
			if got := usd(c.InputNano); got != tt.wantIn {
				t.Errorf("input part %s, want %s", got, tt.wantIn)
			}
			if got := usd(c.CacheWriteNano); got != tt.wantCW {
				t.Errorf("cache write part %s, want %s", got, tt.wantCW)
			}
			sum := c.InputNano + c.CachedNano + c.CacheWriteNano + c.OutputNano + c.ReqNano
			if d := sum - c.CostNano; d < -4 || d > 4 {
				t.Errorf("parts sum to %d, cost %d", sum, c.CostNano)
			}
		})
	}
}

// tableStore records the tables an Explainer hands it.
type tableStore struct{ got *[]string }

func (s tableStore) Charge(_ context.Context, id string, tables ...*pricing.Table) (*Charge, error) {
	*s.got = (*s.got)[:0]
	for _, t := range tables {
		*s.got = append(*s.got, t.Version)
	}
	return &Charge{RequestID: id}, nil
}

// A gateway's explainer breaks events down with the table it bills with
// now (Current), which a reload replaces, besides its fixed Tables.
func TestExplainerCurrentTable(t *testing.T) {
	var got []string
	cur := pricing.NewTable("book-1", nil)
	e := &Explainer{Store: tableStore{&got}, Tables: []*pricing.Table{pricing.NewTable("fixed", nil)},
		Current: func() *pricing.Table { return cur }}
	for _, want := range []string{"book-1", "book-2"} {
		if _, err := e.Explain(context.Background(), "r1"); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0] != "fixed" || got[1] != want {
			t.Fatalf("tables %v, want [fixed %s]", got, want)
		}
		cur = pricing.NewTable("book-2", nil) // a reload
	}
	if len(e.Tables) != 1 {
		t.Fatalf("Explain changed Tables: %d tables", len(e.Tables))
	}
}
