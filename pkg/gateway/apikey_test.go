package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/revoke"

	"github.com/tollgate/tollgate/pkg/testkit"
)

const messagesKeyBody = `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`

// createKey stores an API key and waits until the gateway accepts it.
func (a *acctRig) createKey(t *testing.T, spec apikey.Key) (string, apikey.Key) {
	t.Helper()
	tok, k, err := a.keys.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 5*time.Second, "key "+k.ID, func() bool {
		_, err := a.gw.keys.Verify([]byte(tok))
		return err == nil || !strings.Contains(err.Error(), "unknown")
	})
	return tok, k
}

// TestAPIKeyAuth: an API key is accepted as a bearer token and in
// x-api-key on the OpenAI and Anthropic endpoints; wrong, unknown,
// revoked and expired keys are refused with their code.
func TestAPIKeyAuth(t *testing.T) {
	a := newAcctRig(t, nil)
	good, _ := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research", Name: "nightly"})
	revoked, rk := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research"})
	if _, err := a.keys.Revoke(context.Background(), rk.ID); err != nil {
		t.Fatal(err)
	}
	expired, _ := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research", ExpiresAt: time.Now().Add(-time.Second)})
	testkit.Wait(t, 5*time.Second, "revocation", func() bool {
		_, err := a.gw.keys.Verify([]byte(revoked))
		return err != nil
	})
	unknown := "tg-0123456789abcdef_" + good[len(good)-43:]
	tests := []struct {
		name, path, body string
		headers          []string
		status           int
		code             string // OpenAI error code; "" for the Anthropic shape
	}{
		{"bearer on chat", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer " + good}, 200, ""},
		{"x-api-key on chat", "/v1/chat/completions", chatBody, []string{"x-api-key", good}, 200, ""},
		{"x-api-key on messages", "/v1/messages", messagesKeyBody, []string{"x-api-key", good}, 200, ""},
		{"bearer on messages", "/v1/messages", messagesKeyBody, []string{"Authorization", "Bearer " + good}, 200, ""},
		{"x-api-key on models", "/v1/models", "", []string{"x-api-key", good}, 200, ""},
		{"wrong prefix", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer tk-" + good[3:]}, 401, "invalid_token"},
		{"unknown key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer " + unknown}, 401, "invalid_api_key"},
		{"truncated key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer " + good[:30]}, 401, "invalid_api_key"},
		{"revoked key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer " + revoked}, 401, "key_revoked"},
		{"revoked key on messages", "/v1/messages", messagesKeyBody, []string{"x-api-key", revoked}, 401, ""},
		{"expired key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer " + expired}, 401, "invalid_api_key"},
		{"non-key in x-api-key on chat", "/v1/chat/completions", chatBody, []string{"x-api-key", a.token(nil)}, 401, "missing_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodPost
			if tc.body == "" {
				method = http.MethodGet
			}
			resp := a.send(method, tc.path, "", "application/json", strings.NewReader(tc.body), int64(len(tc.body)), tc.headers...)
			body := readBody(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.code != "" {
				errorShape(t, body, typeAuthentication, tc.code)
			}
		})
	}
	logs := a.logs.String()
	for _, tok := range []string{good, revoked, expired} {
		if strings.Contains(logs, tok[len(tok)-43:]) {
			t.Error("a key's secret appears in the gateway log")
		}
		hash := storedHash(t, a, tok)
		if strings.Contains(logs, hash) || strings.Contains(logs, hash[:16]) || strings.Contains(logs, hash[len(hash)-16:]) {
			t.Error("a key's hash appears in the gateway log")
		}
	}
}

// storedHash returns the hash the key bucket holds for tok's secret, after
// checking it is the hex SHA-256 of the secret, so that a check for it in
// the logs looks for what is really stored.
func storedHash(t *testing.T, a *acctRig, tok string) string {
	t.Helper()
	id := tok[len(apikey.Prefix) : len(tok)-44]
	kv, err := a.js.KeyValue(context.Background(), apikey.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("read key %s: %v", id, err)
	}
	var rec struct {
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(tok[len(tok)-43:]))
	if want := hex.EncodeToString(sum[:]); rec.Hash != want {
		t.Fatalf("stored hash %q, want the SHA-256 of the secret %q", rec.Hash, want)
	}
	return rec.Hash
}

// TestAPIKeyAccounting: a key's spend counts against its own department
// and its key id, never another department's, and its rate limit applies
// per key id.
func TestAPIKeyAccounting(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{
			{Scope: "dept", Value: "*", AmountUSD: "100", Period: "day"},
			{Scope: "dept", Value: "finance", AmountUSD: "0.000000001", Period: "day"},
			{Scope: "key", Value: "*", AmountUSD: "100", Period: "day"},
		}
	})
	research, rk := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research"})
	finance, _ := a.createKey(t, apikey.Key{Subject: "batch", Dept: "finance"})
	// finance's budget refuses finance's key; research's key still passes,
	// and its spend counts against research and its key id only.
	resp := a.post("/v1/chat/completions", finance, chatBody)
	errorShape(t, readBody(t, resp), typeBudget, "budget_exceeded")
	for i := range 3 {
		if resp := a.post("/v1/chat/completions", research, chatBody); resp.StatusCode != 200 {
			t.Fatalf("research request %d: %d %s", i, resp.StatusCode, readBody(t, resp))
		}
	}
	for _, ev := range a.events(t, 4) { // the refusal is an event too
		if (ev.KeyId == rk.ID) != (ev.Dept == "research") || ev.Subject != "batch" {
			t.Errorf("event dept %q key %q subject %q", ev.Dept, ev.KeyId, ev.Subject)
		}
	}
	testkit.Wait(t, 5*time.Second, "research spend", func() bool {
		return a.tracker.Used(budget.ScopeKey, rk.ID, budget.PeriodDay) > 0 && a.tracker.Used(budget.ScopeDept, "research", budget.PeriodDay) > 0
	})
	if used := a.tracker.Used(budget.ScopeDept, "finance", budget.PeriodDay); used != 0 {
		t.Errorf("finance's spend is %d nano-USD; research's key must not count against it", used)
	}

	limited, _ := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research", RPM: 1})
	other, _ := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research", RPM: 1})
	codes := []int{}
	for _, tok := range []string{limited, limited, other} {
		resp := a.post("/v1/chat/completions", tok, chatBody)
		readBody(t, resp)
		codes = append(codes, resp.StatusCode)
	}
	if !slices.Equal(codes, []int{200, 429, 200}) {
		t.Errorf("rpm 1 per key: statuses %v, want [200 429 200]", codes)
	}
}

// TestAPIKeyRevocationPropagation revokes API keys and measures how long
// until the gateway refuses them over HTTP (logged: p50 and max; the target
// is p99 under 100 ms, as for token revocation, which the max bounds).
func TestAPIKeyRevocationPropagation(t *testing.T) {
	a := newAcctRig(t, nil)
	var lat []time.Duration
	for i := 0; i < 30; i++ {
		tok, k := a.createKey(t, apikey.Key{Subject: "batch", Dept: "research"})
		if resp := a.post("/v1/chat/completions", tok, chatBody); resp.StatusCode != 200 {
			t.Fatalf("before revocation: %d", resp.StatusCode)
		}
		start := time.Now()
		if _, err := a.keys.Revoke(context.Background(), k.ID); err != nil {
			t.Fatal(err)
		}
		for {
			resp := a.post("/v1/chat/completions", tok, chatBody)
			body := readBody(t, resp)
			if resp.StatusCode == 401 {
				errorShape(t, body, typeAuthentication, "key_revoked")
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("key %s still accepted 5 s after revocation", k.ID)
			}
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	// 30 samples have no p99 of their own: the largest is reported.
	t.Logf("api key revocation to refusal over HTTP: p50 %v, max %v (n=%d)", lat[len(lat)/2], lat[len(lat)-1], len(lat))
	// A token revocation of the key's subject refuses its keys too.
	tok, _ := a.createKey(t, apikey.Key{Subject: "mallory", Dept: "research"})
	if err := revoke.Revoke(context.Background(), a.revokedKV, revoke.Subject, "mallory", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 5*time.Second, "subject revocation", func() bool {
		resp := a.post("/v1/chat/completions", tok, chatBody)
		body := readBody(t, resp)
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal(body, &e)
		return resp.StatusCode == 401 && e.Error.Code == "token_revoked"
	})
}
