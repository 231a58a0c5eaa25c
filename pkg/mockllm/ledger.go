package mockllm

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
)

// maxLedgerGroups bounds the distinct (model, prompt, completion) groups the
// ledger itemises; answers beyond it are only counted (Ledger.Overflow).
const maxLedgerGroups = 100_000

// Ledger is what the mock served, in the form a gateway bills it, as served
// by GET /ledger (reconciliation, pkg/reconcile, compares it with the usage
// events). It counts since start or the last reset (POST /ledger/reset or
// POST /stats/reset).
//
// An answer is served when the mock completed it: a non-stream answer
// (chat, completions, Anthropic, Gemini, Bedrock, embeddings) whose body was
// generated, or a stream whose last event was written. Served answers that
// reported usage are itemised in Answers, grouped by model and token counts
// (prices round per request, so costs are computed per group, never from
// summed tokens); served answers without usage (no_usage, or bad_usage:
// malformed usage) are counted in WithoutUsage, since the gateway bills them
// from its own estimate. Injected status errors, refusals, context overflows
// and garbage are no answer at all; streams that did not reach
// their end (cut, error event, or the reader went away) are counted in
// Incomplete and are not served either.
type Ledger struct {
	// Answers are the served answers that reported usage.
	Answers []LedgerEntry `json:"answers"`
	// WithoutUsage counts served answers that reported no usage.
	WithoutUsage int64 `json:"without_usage"`
	// Incomplete counts streams that ended before their last event.
	Incomplete int64 `json:"incomplete"`
	// Overflow counts served answers with usage not itemised in Answers
	// because the ledger already held its maximum of 100000 groups.
	Overflow int64 `json:"overflow"`
}

// LedgerEntry counts the served answers of one model with the same usage.
type LedgerEntry struct {
	// Model is the model the request named (for Gemini and Bedrock, the
	// model of the URL path).
	Model            string `json:"model"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	Count            int64  `json:"count"`
}

// ledgerKey is one group of the ledger.
type ledgerKey struct{ prompt, completion int }

// ledger is the live, mutex-guarded form of Ledger.
type ledger struct {
	mu       sync.Mutex
	models   map[string]map[ledgerKey]int64 // guarded by mu; model as received (raw JSON or path)
	groups   int                            // guarded by mu
	noUsage  int64                          // guarded by mu
	partial  int64                          // guarded by mu
	overflow int64                          // guarded by mu
}

// served records a completed answer; model is the request's model, as raw
// JSON (quoted) or as plain text.
func (l *ledger) served(model string, prompt, completion int, usage bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !usage {
		l.noUsage++
		return
	}
	m := l.models[model]
	if m == nil {
		if l.models == nil {
			l.models = make(map[string]map[ledgerKey]int64)
		}
		m = make(map[ledgerKey]int64)
		l.models[strings.Clone(model)] = m
	}
	k := ledgerKey{prompt, completion}
	if _, ok := m[k]; !ok {
		if l.groups >= maxLedgerGroups {
			l.overflow++
			return
		}
		l.groups++
	}
	m[k]++
}

// incomplete records a stream that did not reach its end.
func (l *ledger) incomplete() {
	l.mu.Lock()
	l.partial++
	l.mu.Unlock()
}

func (l *ledger) snapshot() Ledger {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := Ledger{Answers: make([]LedgerEntry, 0, l.groups), WithoutUsage: l.noUsage, Incomplete: l.partial, Overflow: l.overflow}
	for raw, m := range l.models {
		name := raw
		if strings.HasPrefix(raw, `"`) {
			if s, err := strconv.Unquote(raw); err == nil {
				name = s
			} else if err := json.Unmarshal([]byte(raw), &s); err == nil {
				name = s
			}
		}
		for k, n := range m {
			out.Answers = append(out.Answers, LedgerEntry{Model: name, PromptTokens: int64(k.prompt), CompletionTokens: int64(k.completion), Count: n})
		}
	}
	sort.Slice(out.Answers, func(i, j int) bool {
		a, b := out.Answers[i], out.Answers[j]
		if a.Model != b.Model {
			return a.Model < b.Model
		}
		if a.PromptTokens != b.PromptTokens {
			return a.PromptTokens < b.PromptTokens
		}
		return a.CompletionTokens < b.CompletionTokens
	})
	return out
}

func (l *ledger) reset() {
	l.mu.Lock()
	l.models, l.groups, l.noUsage, l.partial, l.overflow = nil, 0, 0, 0, 0
	l.mu.Unlock()
}

// Ledger returns a snapshot of what the server served (see Ledger).
func (s *Server) Ledger() Ledger { return s.ledger.snapshot() }

// ResetLedger empties the ledger.
func (s *Server) ResetLedger() { s.ledger.reset() }

// serveLedger answers GET /ledger and POST /ledger/reset; it reports
// whether path was one of them.
func (s *Server) serveLedger(ctx *fasthttp.RequestCtx, path []byte) bool {
	switch string(path) {
	case "/ledger":
		if s.method(ctx, fasthttp.MethodGet) {
			s.writeLedger(ctx)
		}
	case "/ledger/reset":
		if s.method(ctx, fasthttp.MethodPost) {
			s.ResetLedger()
			s.writeLedger(ctx)
		}
	default:
		return false
	}
	return true
}

func (s *Server) writeLedger(ctx *fasthttp.RequestCtx) {
	body, err := json.Marshal(s.Ledger())
	if err != nil { // cannot happen: strings and integers only
		writeError(ctx, fasthttp.StatusInternalServerError, "server_error", "encode ledger", "", "")
		return
	}
	ctx.SetContentType(contentJSON)
	ctx.SetBody(body)
}
