package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// mockLedger is the body of the mock upstream's GET /ledger (the JSON of
// pkg/mockllm's Ledger, read here without linking the mock into the
// operator tool; a test reads a real mock's ledger through it).
type mockLedger struct {
	Answers []struct {
		Model            string `json:"model"`
		PromptTokens     int64  `json:"prompt_tokens"`
		CompletionTokens int64  `json:"completion_tokens"`
		Count            int64  `json:"count"`
	} `json:"answers"`
	WithoutUsage int64 `json:"without_usage"`
	Incomplete   int64 `json:"incomplete"`
	Overflow     int64 `json:"overflow"`
}

// readMock reads the mock's ledger and prices each group of answers.
func readMock(ctx context.Context, src *Sources) (Source, error) {
	url := strings.TrimSuffix(strings.TrimSuffix(src.MockURL, "/"), "/v1") + "/ledger"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Source{}, fmt.Errorf("read mock ledger: %w", err)
	}
	resp, err := src.HTTPClient.Do(req)
	if err != nil {
		return Source{}, fmt.Errorf("read mock ledger: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Source{}, fmt.Errorf("read mock ledger: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Source{}, fmt.Errorf("read mock ledger: %s answered %d: %.200s", url, resp.StatusCode, body)
	}
	var l mockLedger
	if err := json.Unmarshal(body, &l); err != nil {
		return Source{}, fmt.Errorf("read mock ledger: decode %s: %w", url, err)
	}
	return priceLedger(&l, src.Prices), nil
}

// priceLedger sums the ledger's served answers, each group priced as the
// gateway prices one request.
func priceLedger(l *mockLedger, prices *pricing.Table) Source {
	var served tally
	var unpriced int64
	for _, e := range l.Answers {
		p, ok := prices.Lookup(e.Model)
		if !ok {
			unpriced += e.Count
		}
		c := p.Cost(pricing.Usage{PromptTokens: uint64(max(e.PromptTokens, 0)), CompletionTokens: uint64(max(e.CompletionTokens, 0))})
		served.n += e.Count
		served.cost += c * e.Count
	}
	return Source{Name: SourceMock, Requests: served.n, CostNanoUSD: served.cost, Extra: map[string]int64{
		"without_usage":    l.WithoutUsage,
		"incomplete":       l.Incomplete,
		"unpriced_answers": unpriced,
		"overflow":         l.Overflow,
	}}
}
