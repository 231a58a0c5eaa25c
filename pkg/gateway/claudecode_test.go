package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// claudeCodeBetas is an anthropic-beta header as Claude Code sends it.
const claudeCodeBetas = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,effort-2025-11-24"

// TestClaudeCodeTranslated sends Claude Code's first request (a
// system-role message inside messages, system blocks with cache_control,
// 12 tools, adaptive thinking, context_management, output_config.effort,
// metadata.user_id; testdata/claude_code_first_request.json) to
// /v1/messages?beta=true with its anthropic-beta header, for models served
// by translation on each kind, streamed (issue #46). The prompt names the
// Bash tool, so the mock calls it; the tool's result goes back in a second
// request and the final answer quotes it. Each answer is a well-formed
// Anthropic event sequence and each request's usage event is published
// with its tokens and cost. The upstream never sees the beta query or
// header; the effort reaches the kinds that have one.
func TestClaudeCodeTranslated(t *testing.T) {
	up, _ := newRecordingUpstream(t)
	a := sdkRigAt(t, "http://"+up.addr)
	first, err := os.ReadFile(filepath.Join("testdata", "claude_code_first_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok := a.token(nil)
	n := 0 // requests made
	for _, tt := range []struct {
		model string
		// upstream checks the first request as the upstream received it.
		upstream func(t *testing.T, body string)
	}{
		{"mock-gpt", func(t *testing.T, body string) {
			sys := gjson.Get(body, "messages.0")
			if sys.Get("role").Str != "system" || !strings.HasPrefix(sys.Get("content").Str, "x-anthropic-billing-header") ||
				!strings.HasSuffix(sys.Get("content").Str, "Today's date: 2026-12-07\n</env>") {
				t.Errorf("first message %s, want the system blocks and the system-role message in one system message", sys.Raw)
			}
			if n := gjson.Get(body, `messages.#(role="system")#`).Array(); len(n) != 1 {
				t.Errorf("%d system messages, want 1", len(n))
			}
			if e := gjson.Get(body, "reasoning_effort").Str; e != "high" {
				t.Errorf("reasoning_effort %q, want output_config's high", e)
			}
			if n := len(gjson.Get(body, "tools").Array()); n != 12 {
				t.Errorf("%d tools upstream, want 12", n)
			}
		}},
		{"gemini-mock", func(t *testing.T, body string) {
			if !gjson.Get(body, "generationConfig.thinkingConfig").Exists() {
				t.Errorf("no thinkingConfig upstream: the effort was lost: %.300s", body)
			}
		}},
		{"bedrock-mock", func(t *testing.T, body string) {
			if strings.Contains(body, "reasoning") {
				t.Errorf("bedrock got a reasoning effort (it has none): %.300s", body)
			}
		}},
	} {
		t.Run(tt.model, func(t *testing.T) {
			body := setModel(t, first, tt.model)
			resp := a.post("/v1/messages?beta=true", tok, body, "anthropic-beta", claudeCodeBetas, "anthropic-version", "2023-06-01")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			n++
			id := resp.Header.Get("request-id")
			blocks := anthropicSequence(t, readEvents(t, resp.Body))
			resp.Body.Close()
			header, sent := up.lastRequest(t)
			lower := strings.ToLower(header)
			if strings.Contains(lower, "anthropic-beta") || strings.Contains(lower, "beta=true") || strings.Contains(lower, "anthropic-version") {
				t.Errorf("the client's beta query or anthropic headers reached the upstream:\n%s", header)
			}
			for _, k := range []string{"cache_control", "context_management", "output_config", "claude-code-20250219"} {
				if strings.Contains(sent, k) {
					t.Errorf("%s reached the upstream", k)
				}
			}
			tt.upstream(t, sent)
			if len(blocks) != 1 || blocks[0].Get("type").Str != "tool_use" || blocks[0].Get("name").Str != "Bash" ||
				blocks[0].Get("input.command").Str == "" {
				t.Fatalf("first answer %v, want one Bash call with a command", blocks)
			}
			checkClaudeCodeUsage(t, a, n, id, tt.model)

			// The tool's result goes back; the answer quotes it.
			const result = "42 Go files"
			next := appendTurn(t, body, blocks[0], result)
			resp = a.post("/v1/messages?beta=true", tok, next, "anthropic-beta", claudeCodeBetas)
			if resp.StatusCode != 200 {
				t.Fatalf("second turn: status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			n++
			id = resp.Header.Get("request-id")
			blocks = anthropicSequence(t, readEvents(t, resp.Body))
			resp.Body.Close()
			if len(blocks) != 1 || blocks[0].Get("type").Str != "text" || !strings.Contains(blocks[0].Get("text").Str, result) {
				t.Fatalf("final answer %v, want text quoting %q", blocks, result)
			}
			checkClaudeCodeUsage(t, a, n, id, tt.model)
		})
	}
}

// setModel returns the request body with model set.
func setModel(t *testing.T, body []byte, model string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m["model"] = model
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// appendTurn returns body with the assistant's tool_use block and the
// user's tool_result for it appended, as Claude Code sends its next request.
func appendTurn(t *testing.T, body string, call gjson.Result, result string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	var use any
	if err := json.Unmarshal([]byte(call.Raw), &use); err != nil {
		t.Fatal(err)
	}
	m["messages"] = append(m["messages"].([]any),
		map[string]any{"role": "assistant", "content": []any{use}},
		map[string]any{"role": "user", "content": []any{map[string]any{
			"type": "tool_result", "tool_use_id": call.Get("id").Str,
			"content":       []any{map[string]any{"type": "text", "text": result}},
			"cache_control": map[string]any{"type": "ephemeral"},
		}}})
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// anthropicSequence checks a Messages stream's event order (message_start;
// per block content_block_start, its deltas, content_block_stop;
// message_delta with usage; message_stop; ping anywhere) and returns the
// blocks it built: text blocks with their text, tool_use blocks with their
// input parsed from the input_json_delta fragments.
func anthropicSequence(t *testing.T, evs []sseEvent) []gjson.Result {
	t.Helper()
	var blocks []gjson.Result
	var cur map[string]any
	var text, input strings.Builder
	state := "start"
	for _, ev := range evs {
		d := gjson.Parse(ev.data)
		typ := d.Get("type").Str
		if typ == "ping" {
			continue
		}
		bad := false
		switch typ {
		case "message_start":
			bad = state != "start" || d.Get("message.role").Str != "assistant"
			state = "message"
		case "content_block_start":
			bad = state != "message"
			if err := json.Unmarshal([]byte(d.Get("content_block").Raw), &cur); err != nil {
				t.Fatal(err)
			}
			text.Reset()
			input.Reset()
			state = "block"
		case "content_block_delta":
			bad = state != "block"
			switch dt := d.Get("delta"); dt.Get("type").Str {
			case "text_delta":
				text.WriteString(dt.Get("text").Str)
			case "input_json_delta":
				input.WriteString(dt.Get("partial_json").Str)
			}
		case "content_block_stop":
			bad = state != "block"
			if cur["type"] == "tool_use" {
				var in any
				if err := json.Unmarshal([]byte(input.String()), &in); err != nil {
					t.Fatalf("tool input %q is not JSON: %v", input.String(), err)
				}
				cur["input"] = in
			} else {
				cur["text"] = text.String()
			}
			b, _ := json.Marshal(cur)
			blocks = append(blocks, gjson.ParseBytes(b))
			state = "message"
		case "message_delta":
			bad = state != "message" || d.Get("delta.stop_reason").Str == "" || d.Get("usage.output_tokens").Int() <= 0
			state = "delta"
		case "message_stop":
			bad = state != "delta"
			state = "stop"
		default:
			bad = true
		}
		if bad {
			t.Fatalf("event %s out of sequence (after %s): %s", typ, state, ev.data)
		}
	}
	if state != "stop" {
		t.Fatalf("stream ended after %s, want message_stop", state)
	}
	return blocks
}

// checkClaudeCodeUsage checks the usage event of request id, the n-th
// request: the provider's token counts, billed at the model's price when
// the price table has one.
func checkClaudeCodeUsage(t *testing.T, a *acctRig, n int, id, model string) {
	t.Helper()
	var ev *usagev1.UsageEvent
	for _, e := range a.events(t, n) {
		if e.RequestId == id {
			ev = e
		}
	}
	if ev == nil {
		t.Fatalf("no usage event for request %s", id)
	}
	if ev.RequestedModel != model || ev.Endpoint != "/v1/messages" || ev.StatusCode != 200 || ev.Estimated ||
		ev.PromptTokens == 0 || ev.CompletionTokens == 0 {
		t.Fatalf("usage event model %s endpoint %s status %d estimated %v tokens %d/%d",
			ev.RequestedModel, ev.Endpoint, ev.StatusCode, ev.Estimated, ev.PromptTokens, ev.CompletionTokens)
	}
	price, ok := pricing.Default().Lookup(model)
	if model == "mock-gpt" && !ok {
		t.Fatal("no price for mock-gpt")
	}
	if want := price.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens}); ok && (want <= 0 || ev.CostNanoUsd != want) {
		t.Errorf("cost %d, want %d", ev.CostNanoUsd, want)
	}
}

// TestMessagesBodyTooLarge: a body over body_limit on /v1/messages is
// refused in the Anthropic shape Claude Code reads, not the OpenAI one.
func TestMessagesBodyTooLarge(t *testing.T) {
	r := newRig(t, nil)
	body := `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"` + strings.Repeat("a", 70000) + `"}]}`
	resp := r.post("/v1/messages?beta=true", r.token(nil), body)
	got := readBody(t, resp)
	if resp.StatusCode != 413 || gjson.GetBytes(got, "type").Str != "error" || gjson.GetBytes(got, "error.type").Str != "request_too_large" {
		t.Errorf("status %d body %s, want 413 with an Anthropic request_too_large error", resp.StatusCode, got)
	}
}
