package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
)

// TestPriorityFromClaim: past 30% of the department's budget a ladder
// refuses batch traffic (issue 41, finding 9). A principal whose priority
// is batch (token claim, API key field, or priority.default) cannot evade
// that by omitting x-tollgate-priority, by writing it in another case or
// by naming a higher level; the header can only lower a priority, and an
// unknown value is refused.
func TestPriorityFromClaim(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "research", AmountUSD: "0.0001", Period: "day", Degrade: []config.DegradeStep{
			{At: 0.3, Priorities: []string{"Batch"}, Refuse: true}}}}
	})
	body := `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`
	interactive := a.token(nil)
	for float64(a.tracker.Used(budget.ScopeDept, "research", budget.PeriodDay))/100_000 < 0.3 {
		resp := a.post("/v1/chat/completions", interactive, body)
		if b := readBody(t, resp); resp.StatusCode != 200 {
			t.Fatalf("spending: %d %s", resp.StatusCode, b)
		}
	}
	batchTok := a.token(func(o *auth.MintOptions) { o.Priority = "batch" })
	batchKey, _ := a.createKey(t, apikey.Key{Subject: "nightly", Dept: "research", Priority: "batch"})
	tests := []struct {
		name, token, header string
		want                int
		wantCode            string
	}{
		{name: "batch claim, no header", token: batchTok, want: 429, wantCode: "budget_degraded"},
		{name: "batch claim, header Batch", token: batchTok, header: "Batch", want: 429, wantCode: "budget_degraded"},
		{name: "batch claim raises itself to interactive", token: batchTok, header: "interactive", want: 429, wantCode: "budget_degraded"},
		{name: "batch claim, header in capitals", token: batchTok, header: "INTERACTIVE", want: 429, wantCode: "budget_degraded"},
		{name: "batch API key, no header", token: batchKey, want: 429, wantCode: "budget_degraded"},
		{name: "batch API key raises itself", token: batchKey, header: "interactive", want: 429, wantCode: "budget_degraded"},
		{name: "unknown header value", token: batchTok, header: "urgent", want: 400, wantCode: "invalid_priority"},
		{name: "unknown header value, interactive token", token: interactive, header: "vip", want: 400, wantCode: "invalid_priority"},
		{name: "unknown claim value", token: a.token(func(o *auth.MintOptions) { o.Priority = "vip" }), want: 401, wantCode: "invalid_priority"},
		{name: "interactive lowers itself to Batch", token: interactive, header: "Batch", want: 429, wantCode: "budget_degraded"},
		// What passes: the refusals above can fail.
		{name: "interactive, no header", token: interactive, want: 200},
		{name: "interactive claim in capitals", token: a.token(func(o *auth.MintOptions) { o.Priority = "Interactive" }), want: 200},
		{name: "interactive lowers itself to background", token: interactive, header: "background", want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			if tt.header != "" {
				headers = []string{"X-Tollgate-Priority", tt.header}
			}
			resp := a.post("/v1/chat/completions", tt.token, body, headers...)
			b := readBody(t, resp)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
			if tt.wantCode == "" {
				return
			}
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != tt.wantCode {
				t.Errorf("code %q, want %q: %s", e.Error.Code, tt.wantCode, b)
			}
		})
	}

	t.Run("priority.default batch for principals without a claim", func(t *testing.T) {
		d := newAcctRig(t, func(c *config.Config) {
			c.Priority = config.Priority{Default: "batch"}
			c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "research", AmountUSD: "0.0001", Period: "day", Degrade: []config.DegradeStep{
				{At: 0.3, Priorities: []string{"batch"}, Refuse: true}}}}
		})
		vip := d.token(func(o *auth.MintOptions) { o.Priority = "interactive" })
		for float64(d.tracker.Used(budget.ScopeDept, "research", budget.PeriodDay))/100_000 < 0.3 {
			resp := d.post("/v1/chat/completions", vip, body)
			if b := readBody(t, resp); resp.StatusCode != 200 {
				t.Fatalf("spending: %d %s", resp.StatusCode, b)
			}
		}
		for _, h := range [][]string{nil, {"X-Tollgate-Priority", "interactive"}} {
			resp := d.post("/v1/chat/completions", d.token(nil), body, h...)
			if b := readBody(t, resp); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "budget_degraded") {
				t.Errorf("claimless token, header %v: %d %s", h, resp.StatusCode, b)
			}
		}
	})
}
