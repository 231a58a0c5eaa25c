package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/tokenize"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// namedEvent is one SSE event of a Responses stream as the client got it.
type namedEvent struct {
	name string
	data map[string]json.RawMessage
}

// readNamed reads every event of a Responses stream.
func readNamed(t testing.TB, body io.Reader) []namedEvent {
	t.Helper()
	var out []namedEvent
	var cur namedEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != nil {
				out = append(out, cur)
			}
			cur = namedEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("event data is not JSON: %q", line)
			}
		default:
			t.Fatalf("not SSE: %q", line)
		}
	}
	return out
}

func (e namedEvent) str(key string) string {
	var s string
	_ = json.Unmarshal(e.data[key], &s)
	return s
}

// TestResponsesEndToEnd sends Responses API requests through the gateway to
// the mock and checks what the client got and the usage event.
func TestResponsesEndToEnd(t *testing.T) {
	price, ok := pricing.Default().Lookup("mock-gpt")
	if !ok {
		t.Fatal("mock-gpt has no price")
	}
	tests := []struct {
		name   string
		body   string
		stream bool
		// what the client gets
		lastEvent  string // stream: the last event's name
		errorCode  string // stream: the code of a gateway error event at the end
		wantStatus string // non-stream: the response's status
		// the usage event
		errType            string
		estimated          bool
		prompt, completion uint64 // exact when not estimated
		cached, reasoning  uint64
	}{
		{name: "non-stream", body: `{"model":"mock-gpt","input":"one two three","mock":{"chunks":4,"cached_tokens":2,"reasoning_tokens":5}}`,
			wantStatus: "completed", prompt: 3, completion: 4 + 5, cached: 2, reasoning: 5},
		{name: "non-stream max_output_tokens", body: `{"model":"mock-gpt","input":"one two three","max_output_tokens":2,"mock":{"chunks":4}}`,
			wantStatus: "incomplete", prompt: 3, completion: 2},
		{name: "stream", body: `{"model":"mock-gpt","input":"one two three","stream":true,"mock":{"chunks":4,"cached_tokens":1,"reasoning_tokens":3}}`,
			stream: true, lastEvent: "response.completed", prompt: 3, completion: 4 + 3, cached: 1, reasoning: 3},
		{name: "stream max_output_tokens", body: `{"model":"mock-gpt","input":"one two three","stream":true,"max_output_tokens":2,"mock":{"chunks":4}}`,
			stream: true, lastEvent: "response.incomplete", prompt: 3, completion: 2},
		{name: "stream response.failed", body: `{"model":"mock-gpt","input":"one two three","stream":true,"mock":{"chunks":4,"error_event_after":2}}`,
			stream: true, lastEvent: "response.failed", errType: "upstream_error", estimated: true},
		{name: "stream cut", body: `{"model":"mock-gpt","input":"one two three","stream":true,"mock":{"chunks":4,"cut_after":2}}`,
			stream: true, lastEvent: "error", errorCode: "upstream_stream_cut", errType: "upstream_stream_cut", estimated: true},
		{name: "non-stream without usage", body: `{"model":"mock-gpt","input":"one two three","mock":{"chunks":4,"no_usage":true}}`,
			wantStatus: "completed", estimated: true},
		{name: "non-stream malformed usage", body: `{"model":"mock-gpt","input":"one two three","mock":{"chunks":4,"bad_usage":true}}`,
			wantStatus: "completed", estimated: true},
		{name: "stream malformed usage", body: `{"model":"mock-gpt","input":"one two three","stream":true,"mock":{"chunks":4,"bad_usage":true}}`,
			stream: true, lastEvent: "response.completed", estimated: true},
	}
	est := tokenize.New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAcctRig(t, nil)
			resp := a.post("/v1/responses", a.token(nil), tc.body, "X-Request-Id", "resp-"+strings.ReplaceAll(tc.name, " ", "-"))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			if got := resp.Header.Get("X-Tollgate-Provider"); got != "mock" {
				t.Errorf("x-tollgate-provider %q", got)
			}
			var text string // what the client got
			if tc.stream {
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Errorf("content type %q", ct)
				}
				evs := readNamed(t, resp.Body)
				resp.Body.Close()
				checkResponsesStream(t, evs, tc.lastEvent, tc.errorCode)
				for _, ev := range evs {
					if ev.name == "response.output_text.delta" {
						text += ev.str("delta")
					}
				}
			} else {
				var r struct {
					Object, Status string
					Output         []struct {
						Content []struct{ Text string }
					}
				}
				if err := json.Unmarshal(readBody(t, resp), &r); err != nil || r.Object != "response" || r.Status != tc.wantStatus || len(r.Output) != 1 {
					t.Fatalf("response object %+v (%v), want status %s", r, err, tc.wantStatus)
				}
				text = r.Output[0].Content[0].Text
			}
			ev := a.events(t, 1)[0]
			if ev.Endpoint != "/v1/responses" || ev.Stream != tc.stream || ev.StatusCode != 200 || ev.ErrorType != tc.errType ||
				ev.Estimated != tc.estimated || ev.RequestedModel != "mock-gpt" || ev.Provider != "mock" {
				t.Errorf("event endpoint %q stream %v status %d error %q estimated %v model %q provider %q",
					ev.Endpoint, ev.Stream, ev.StatusCode, ev.ErrorType, ev.Estimated, ev.RequestedModel, ev.Provider)
			}
			if tc.estimated {
				// The prompt and the delivered text, counted by the tokenizer.
				wantIn, wantOut := uint64(est.Prompt([]byte(tc.body))), uint64(est.Count([]byte(text)))
				if ev.PromptTokens != wantIn || ev.CompletionTokens != wantOut || wantOut == 0 {
					t.Errorf("estimated prompt %d completion %d, want %d %d (text %q)", ev.PromptTokens, ev.CompletionTokens, wantIn, wantOut, text)
				}
				return
			}
			if ev.PromptTokens != tc.prompt || ev.CompletionTokens != tc.completion || ev.CachedTokens != tc.cached || ev.ReasoningTokens != tc.reasoning {
				t.Errorf("tokens prompt %d completion %d cached %d reasoning %d, want %d %d %d %d",
					ev.PromptTokens, ev.CompletionTokens, ev.CachedTokens, ev.ReasoningTokens, tc.prompt, tc.completion, tc.cached, tc.reasoning)
			}
			want := price.Cost(pricing.Usage{PromptTokens: tc.prompt, CompletionTokens: tc.completion, CachedTokens: tc.cached, ReasoningTokens: tc.reasoning})
			if ev.CostNanoUsd != want || want <= 0 {
				t.Errorf("cost %d, want %d", ev.CostNanoUsd, want)
			}
		})
	}
}

// checkResponsesStream checks a relayed Responses stream: it starts with
// response.created, every upstream event keeps its sequence number, and
// it ends with last (and a gateway error event has the Responses shape).
func checkResponsesStream(t *testing.T, evs []namedEvent, last, errorCode string) {
	t.Helper()
	if len(evs) < 2 || evs[0].name != "response.created" {
		t.Fatalf("stream %v", evs)
	}
	for i, ev := range evs {
		var seq int
		if err := json.Unmarshal(ev.data["sequence_number"], &seq); err != nil || seq != i || ev.str("type") != ev.name {
			t.Errorf("event %d: name %q type %q sequence %s", i, ev.name, ev.str("type"), ev.data["sequence_number"])
		}
	}
	end := evs[len(evs)-1]
	if end.name != last {
		t.Fatalf("last event %q, want %q", end.name, last)
	}
	if errorCode != "" && (end.str("code") != errorCode || end.str("message") == "" || string(end.data["param"]) != "null") {
		t.Errorf("error event %v", end.data)
	}
	for _, ev := range evs[:len(evs)-1] {
		if ev.name == "error" || ev.name == "response.failed" {
			t.Errorf("a second terminal event %q before the last", ev.name)
		}
	}
}

// responsesRig serves, next to the mock: claude-mock (anthropic kind),
// mixed (a mock target and an anthropic one), primary (a failing upstream
// falling back to mock-gpt), via-claude (failing, falling back through
// claude-mock to mock-gpt) and only-claude (failing, falling back to
// claude-mock alone).
func responsesRig(t *testing.T) *rig {
	badURL, _ := failingUpstream(t, 500, `{"error":{"message":"boom","type":"server_error"}}`)
	r := newRig(t, nil)
	return newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		base := strings.TrimSuffix(c.Providers[0].BaseURL, "/v1")
		c.Providers = append(c.Providers, config.Provider{Name: "claude", Kind: config.KindAnthropic, BaseURL: base, APIKey: testProvKey,
			Timeouts: c.Providers[0].Timeouts},
			config.Provider{Name: "az", Kind: config.KindAzure, BaseURL: base, APIVersion: "2024-10-21", APIKey: testProvKey, Timeouts: c.Providers[0].Timeouts})
		addProvider(c, "bad", badURL)
		c.Models = append(c.Models,
			config.Model{Name: "claude-mock", Targets: []config.Target{{Provider: "claude"}}},
			config.Model{Name: "azure-mock", Targets: []config.Target{{Provider: "az", Model: "my-deployment"}}},
			config.Model{Name: "mixed", Targets: []config.Target{{Provider: "mock"}, {Provider: "claude"}}},
			config.Model{Name: "primary", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"mock-gpt"}},
			config.Model{Name: "via-claude", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"claude-mock", "mock-gpt"}},
			config.Model{Name: "only-claude", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"claude-mock"}})
		c.ApplyDefaults()
	})
}

func TestResponsesRouting(t *testing.T) {
	r := responsesRig(t)
	reg := withMetrics(t, r)
	tok := r.token(nil)
	tests := []struct {
		name         string
		body         string
		wantStatus   int
		wantCode     string // error code, or "" for a 200
		wantMsg      []string
		wantAttempts string
		wantModel    string // x-tollgate-model of a 200
	}{
		{name: "served", body: `{"model":"mock-gpt","input":"hi"}`, wantStatus: 200, wantAttempts: "1", wantModel: "mock-gpt"},
		{name: "azure deployment", body: `{"model":"azure-mock","input":"hi"}`, wantStatus: 200, wantAttempts: "1", wantModel: "my-deployment"},
		{name: "anthropic provider translated", body: `{"model":"claude-mock","input":"hi"}`, wantStatus: 200, wantAttempts: "1", wantModel: "claude-mock"},
		{name: "anthropic provider translated, streamed", body: `{"model":"claude-mock","input":"hi","stream":true}`, wantStatus: 200, wantAttempts: "1", wantModel: "claude-mock"},
		{name: "a stateful parameter refused on a route with a translated target", body: `{"model":"mixed","input":"hi","previous_response_id":"resp_1"}`,
			wantStatus: 400, wantCode: "unsupported_parameter", wantMsg: []string{"previous_response_id", "translation"}},
		{name: "embeddings model", body: `{"model":"mock-embed","input":"hi"}`, wantStatus: 400, wantCode: "wrong_endpoint"},
		{name: "unknown model", body: `{"model":"nope","input":"hi"}`, wantStatus: 404, wantCode: "model_not_found"},
		{name: "no model", body: `{"input":"hi"}`, wantStatus: 400, wantCode: "missing_field"},
		{name: "background refused", body: `{"model":"mock-gpt","input":"hi","background":true}`, wantStatus: 400, wantCode: "unsupported_parameter",
			wantMsg: []string{"background"}},
		{name: "escaped background refused", body: `{"model":"mock-gpt","input":"hi","backgr\u006fund":true}`, wantStatus: 400, wantCode: "unsupported_parameter"},
		{name: "repeated background refused", body: `{"model":"mock-gpt","input":"hi","background":false,"background":true}`, wantStatus: 400, wantCode: "duplicate_key",
			wantMsg: []string{"background"}},
		{name: "background false served", body: `{"model":"mock-gpt","input":"hi","background":false}`, wantStatus: 200, wantAttempts: "1", wantModel: "mock-gpt"},
		{name: "fallback before the first byte", body: `{"model":"primary","input":"hi"}`, wantStatus: 200, wantAttempts: "2", wantModel: "mock-gpt"},
		{name: "stream fallback before the first byte", body: `{"model":"primary","input":"hi","stream":true}`, wantStatus: 200, wantAttempts: "2", wantModel: "mock-gpt"},
		{name: "fallback to an anthropic model, translated", body: `{"model":"via-claude","input":"hi"}`, wantStatus: 200, wantAttempts: "2", wantModel: "claude-mock"},
		{name: "a translated fallback refuses what it cannot keep: the primary's failure", body: `{"model":"only-claude","input":"hi","store":true}`,
			wantStatus: 400, wantCode: "unsupported_parameter", wantMsg: []string{"store"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.post("/v1/responses", tok, tc.body)
			body := readBody(t, resp)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantCode != "" {
				typ := typeInvalidRequest
				switch tc.wantStatus {
				case 404:
					typ = typeInvalidRequest
				case 502:
					typ = typeUpstream
				}
				msg := errorShape(t, body, typ, tc.wantCode)
				for _, w := range tc.wantMsg {
					if !strings.Contains(msg, w) {
						t.Errorf("message %q lacks %q", msg, w)
					}
				}
				if resp.StatusCode == 400 && resp.Header.Get("X-Should-Retry") != "false" {
					t.Errorf("400 without x-should-retry: false")
				}
				return
			}
			if got := resp.Header.Get("X-Tollgate-Attempts"); got != tc.wantAttempts {
				t.Errorf("attempts %q, want %s", got, tc.wantAttempts)
			}
			if got := resp.Header.Get("X-Tollgate-Model"); got != tc.wantModel {
				t.Errorf("model %q, want %s", got, tc.wantModel)
			}
			if strings.Contains(tc.body, `"stream":true`) {
				if !strings.Contains(string(body), "event: response.completed") {
					t.Errorf("stream did not complete: %s", body)
				}
			} else if !strings.Contains(string(body), `"object":"response"`) {
				t.Errorf("body %s", body)
			}
		})
	}
	labels := map[string]string{"model": "mock-gpt", "provider": "mock", "endpoint": "/v1/responses", "status": "200"}
	testkit.Wait(t, 2*time.Second, "responses metrics", func() bool { return counter(t, reg, "tollgate_requests_total", labels) == 4 }) // the rows served by mock-gpt
	if !strings.Contains(r.logs.String(), `"endpoint":"/v1/responses"`) {
		t.Errorf("no request log line for /v1/responses")
	}
}

// TestResponsesClampsMaxOutputTokens: a budget clamp on the Responses API
// writes max_output_tokens, which the upstream honours.
func TestResponsesClampsMaxOutputTokens(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		// 0.00003 USD buys about 50 output tokens of mock-gpt (0.60 USD/M).
		c.Budgets = []config.BudgetLimit{{Scope: "team", Value: "*", AmountUSD: "0.00003", Period: "day"}}
	})
	resp := a.post("/v1/responses", a.token(nil), `{"model":"mock-gpt","input":"hi","max_output_tokens":1000,"mock":{"chunks":100}}`)
	body := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var n int
	if _, err := fmt.Sscan(resp.Header.Get("X-Tollgate-Max-Tokens-Clamped"), &n); err != nil || n <= 0 || n >= 100 {
		t.Fatalf("clamp header %q", resp.Header.Get("X-Tollgate-Max-Tokens-Clamped"))
	}
	if !strings.Contains(string(body), `"status":"incomplete"`) {
		t.Errorf("the clamped answer is not incomplete: %s", body)
	}
	if ev := a.events(t, 1)[0]; ev.CompletionTokens != uint64(n) || ev.ClampedMaxTokens != uint32(n) {
		t.Errorf("completion %d clamped %d, header %d", ev.CompletionTokens, ev.ClampedMaxTokens, n)
	}
}

// TestResponsesSDK drives the official OpenAI SDK's Responses client
// against the gateway.
func TestResponsesSDK(t *testing.T) {
	r := responsesRig(t)
	ctx := context.Background()
	client := openai.NewClient(ooption.WithBaseURL(r.url+"/v1/"), ooption.WithAPIKey(r.token(nil)), ooption.WithMaxRetries(0))
	for _, model := range []string{"mock-gpt", "azure-mock", "primary"} {
		t.Run(model, func(t *testing.T) {
			params := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there")},
				Instructions: openai.String("be brief")}
			resp, err := client.Responses.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != "completed" || resp.OutputText() == "" || resp.Usage.OutputTokens == 0 || resp.Usage.InputTokens != 2+2+3 {
				t.Fatalf("response status %q text %q usage %+v", resp.Status, resp.OutputText(), resp.Usage)
			}
			stream := client.Responses.NewStreaming(ctx, params)
			var text strings.Builder
			var done *responses.Response
			for stream.Next() {
				switch ev := stream.Current(); ev.Type {
				case "response.output_text.delta":
					text.WriteString(ev.Delta)
				case "response.completed":
					c := ev.AsResponseCompleted()
					done = &c.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if done == nil || text.String() != resp.OutputText() || done.OutputText() != text.String() || done.Usage.TotalTokens == 0 {
				t.Errorf("streamed %q, completed %v, non-stream %q", text.String(), done, resp.OutputText())
			}
		})
	}
	t.Run("stateful parameter on a translated model", func(t *testing.T) {
		_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "claude-mock",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}, PreviousResponseID: openai.String("resp_1")})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_parameter" || apiErr.Param != "previous_response_id" {
			t.Errorf("err %v", err)
		}
	})
}
