package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// translatedModels are the rig's models served by translation of the
// Responses API (sdkRigAt): the mock as an anthropic, a gemini and a
// bedrock provider.
var translatedModels = []string{"claude-mock", "gemini-mock", "bedrock-mock"}

// priceTranslated has the translated models' targets serve the upstream
// model mock-gpt, which the price table prices, so that their usage events
// carry a cost.
func priceTranslated(c *config.Config) {
	for i := range c.Models {
		if slices.Contains(translatedModels, c.Models[i].Name) {
			c.Models[i].Targets[0].Model = "mock-gpt"
		}
	}
}

// weatherTool is a function tool as Responses clients declare it.
const weatherTool = `{"type":"function","name":"get_weather","description":"Weather of a city","strict":false,` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`

// TestResponsesTranslated sends Responses API requests, as Codex and the
// OpenAI SDKs send them (store false, include reasoning.encrypted_content,
// instructions, developer messages, input items), to models served by
// translation on each kind (issue #46): a plain answer, streamed and not,
// and a tool round trip (function_call, then function_call_output, then
// an answer quoting the result). Each answer is a well-formed response
// object or Responses event sequence, and each request's usage event
// carries the provider's counts, the ones the response reports, billed at
// the model's price.
func TestResponsesTranslated(t *testing.T) {
	up, _ := newRecordingUpstream(t)
	a := sdkRigAt(t, "http://"+up.addr, priceTranslated)
	tok := a.token(nil)
	n := 0 // requests made, for the usage events
	for _, model := range translatedModels {
		t.Run(model, func(t *testing.T) {
			plain := `{"model":"` + model + `","instructions":"be brief","store":false,"include":["reasoning.encrypted_content"],` +
				`"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"you are terse"}]},` +
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}],` +
				`"max_output_tokens":200,"temperature":0.5,"metadata":{"ticket":"T-1"},"user":"alice-client"}`
			resp := a.post("/v1/responses", tok, plain)
			body := readBody(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			n++
			_, sent := up.lastRequest(t)
			for _, k := range []string{"store", "include", "instructions", "encrypted_content", "developer"} {
				if strings.Contains(sent, k) {
					t.Errorf("%q reached the upstream: %.400s", k, sent)
				}
			}
			if !strings.Contains(sent, "be brief") || !strings.Contains(sent, "you are terse") || !strings.Contains(sent, "hello there") {
				t.Errorf("the upstream request lost the instructions or input: %.400s", sent)
			}
			r := gjson.ParseBytes(body)
			checkResponseObject(t, r, model, "completed")
			if out := r.Get("output"); len(out.Array()) != 1 || out.Get("0.type").Str != "message" || out.Get("0.content.0.text").Str == "" {
				t.Fatalf("output %s, want one message with text", out.Raw)
			}
			checkResponsesUsage(t, a, &n, resp.Header.Get("X-Request-Id"), model, r.Get("usage"))

			// Streamed: the Responses event sequence, the same text.
			streamed := strings.Replace(plain, `"store":false`, `"store":false,"stream":true`, 1)
			resp = a.post("/v1/responses", tok, streamed)
			if resp.StatusCode != 200 {
				t.Fatalf("stream status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			n++
			done := responsesSequence(t, readEvents(t, resp.Body))
			resp.Body.Close()
			checkResponseObject(t, done, model, "completed")
			if got, want := done.Get("output.0.content.0.text").Str, r.Get("output.0.content.0.text").Str; got != want {
				t.Errorf("streamed text %q, non-stream %q", got, want)
			}
			checkResponsesUsage(t, a, &n, resp.Header.Get("X-Request-Id"), model, done.Get("usage"))

			// Tool round trip, streamed, as an agent loop runs it.
			first := `{"model":"` + model + `","stream":true,"store":false,"tools":[` + weatherTool + `],"tool_choice":"auto",` +
				`"parallel_tool_calls":true,"input":[{"role":"user","content":"use get_weather for Paris"}]}`
			resp = a.post("/v1/responses", tok, first)
			if resp.StatusCode != 200 {
				t.Fatalf("tool call status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			n++
			done = responsesSequence(t, readEvents(t, resp.Body))
			resp.Body.Close()
			call := done.Get("output.0")
			if len(done.Get("output").Array()) != 1 || call.Get("type").Str != "function_call" || call.Get("name").Str != "get_weather" ||
				call.Get("call_id").Str == "" || !gjson.Valid(call.Get("arguments").Str) || gjson.Get(call.Get("arguments").Str, "city").Str == "" {
				t.Fatalf("output %s, want one get_weather call with a city", done.Get("output").Raw)
			}
			checkResponsesUsage(t, a, &n, resp.Header.Get("X-Request-Id"), model, done.Get("usage"))

			const result = "sunny and 21C"
			second := `{"model":"` + model + `","store":false,"tools":[` + weatherTool + `],"input":[` +
				`{"role":"user","content":"use get_weather for Paris"},` +
				`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"opaque"},` + call.Raw + `,` +
				`{"type":"function_call_output","call_id":` + call.Get("call_id").Raw + `,"output":"` + result + `"}]}`
			resp = a.post("/v1/responses", tok, second)
			body = readBody(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("tool result status %d: %s", resp.StatusCode, body)
			}
			n++
			r = gjson.ParseBytes(body)
			checkResponseObject(t, r, model, "completed")
			if text := r.Get("output.0.content.0.text").Str; !strings.Contains(text, result) {
				t.Fatalf("final answer %s, want text quoting %q", r.Get("output").Raw, result)
			}
			checkResponsesUsage(t, a, &n, resp.Header.Get("X-Request-Id"), model, r.Get("usage"))
		})
	}
}

// TestResponsesTranslatedRefusals: what a translated target cannot do is
// refused before admission with a 400 naming the parameter, and billed
// nothing; store false or absent passes.
func TestResponsesTranslatedRefusals(t *testing.T) {
	a := sdkRigAt(t, "", priceTranslated)
	tok := a.token(nil)
	for _, tc := range []struct {
		name, extra, param string
	}{
		{"previous_response_id", `"previous_response_id":"resp_abc"`, "previous_response_id"},
		{"store true", `"store":true`, "store"},
		{"conversation", `"conversation":"conv_abc"`, "conversation"},
		{"stored prompt", `"prompt":{"id":"pmpt_1"}`, "prompt"},
		{"background", `"background":true`, "background"},
		{"built-in web search", `"tools":[{"type":"web_search"}]`, "tools[0].type"},
		{"built-in file search after a function", `"tools":[` + weatherTool + `,{"type":"file_search","vector_store_ids":["vs_1"]}]`, "tools[1].type"},
		{"item reference", `"input":[{"type":"item_reference","id":"msg_1"}]`, "input[0]"},
		{"file by URL", `"input":[{"role":"user","content":[{"type":"input_file","file_url":"https://example.com/a.pdf"}]}]`, "input[0].content[0]"},
		{"unknown effort", `"reasoning":{"effort":"extreme"}`, "reasoning.effort"},
	} {
		for _, model := range translatedModels {
			t.Run(tc.name+" "+model, func(t *testing.T) {
				body := `{"model":"` + model + `",` + tc.extra
				if !strings.Contains(tc.extra, `"input"`) {
					body += `,"input":"hi"`
				}
				resp := a.post("/v1/responses", tok, body+"}")
				got := readBody(t, resp)
				if resp.StatusCode != 400 {
					t.Fatalf("status %d, want 400: %s", resp.StatusCode, got)
				}
				errorShape(t, got, typeInvalidRequest, "unsupported_parameter")
				if p := gjson.GetBytes(got, "error.param").Str; p != tc.param {
					t.Errorf("param %q, want %q: %s", p, tc.param, got)
				}
			})
		}
	}
	// What a target kind itself refuses is named as the client wrote it.
	for _, tc := range []struct{ model, extra, param string }{
		{"bedrock-mock", `"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}}`, "text.format"},
		{"claude-mock", `"temperature":1.5`, "temperature"},
		{"bedrock-mock", `"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]`, "input"},
	} {
		body := `{"model":"` + tc.model + `",` + tc.extra
		if !strings.Contains(tc.extra, `"input"`) {
			body += `,"input":"hi"`
		}
		resp := a.post("/v1/responses", tok, body+"}")
		got := readBody(t, resp)
		if resp.StatusCode != 400 || gjson.GetBytes(got, "error.param").Str != tc.param || gjson.GetBytes(got, "error.code").Str != "unsupported_parameter" {
			t.Errorf("%s %s: status %d, want 400 naming %s: %s", tc.model, tc.extra, resp.StatusCode, tc.param, got)
		}
	}
	for _, store := range []string{`,"store":false`, ""} {
		resp := a.post("/v1/responses", tok, `{"model":"claude-mock","input":"hi"`+store+`}`)
		if body := readBody(t, resp); resp.StatusCode != 200 {
			t.Errorf("store %q: status %d: %s", store, resp.StatusCode, body)
		}
	}
	// The refusals were billed nothing: the two answers are the only costs.
	var billed int
	for _, ev := range a.events(t, 2+3+10*len(translatedModels)) {
		if ev.CostNanoUsd > 0 {
			billed++
		}
		if ev.StatusCode == 400 && (ev.PromptTokens != 0 || ev.CompletionTokens != 0) {
			t.Errorf("a refused request has tokens: %+v", ev)
		}
	}
	if billed != 2 {
		t.Errorf("%d billed events, want the 2 answers", billed)
	}
}

// TestResponsesSDKTranslated drives the official OpenAI SDK's Responses
// client against models served by translation: a plain answer, streamed
// and not, and a function call answered and sent back.
func TestResponsesSDKTranslated(t *testing.T) {
	a := sdkRig(t)
	ctx := context.Background()
	client := openai.NewClient(ooption.WithBaseURL(a.url+"/v1/"), ooption.WithAPIKey(a.token(nil)), ooption.WithMaxRetries(0))
	for _, model := range translatedModels {
		t.Run(model, func(t *testing.T) {
			params := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there")},
				Instructions: openai.String("be brief"), Store: openai.Bool(false)}
			resp, err := client.Responses.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != "completed" || resp.OutputText() == "" || resp.Usage.OutputTokens == 0 || resp.Usage.InputTokens == 0 ||
				resp.Usage.TotalTokens != resp.Usage.InputTokens+resp.Usage.OutputTokens {
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

			tool := responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}}}, false)
			call, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: []responses.ToolUnionParam{tool},
				Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
				ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}})
			if err != nil {
				t.Fatal(err)
			}
			if len(call.Output) != 1 || call.Output[0].Type != "function_call" || call.Output[0].Name != "get_weather" {
				t.Fatalf("output %+v, want one get_weather call", call.Output)
			}
			fc := call.Output[0].AsFunctionCall()
			out := responses.ResponseInputItemParamOfFunctionCallOutput("rain")
			out.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
			answer, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: []responses.ToolUnionParam{tool},
				Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
					responses.ResponseInputItemParamOfMessage("weather in Paris?", responses.EasyInputMessageRoleUser),
					responses.ResponseInputItemParamOfFunctionCall(fc.Arguments, fc.CallID, fc.Name),
					out,
				}}})
			if err != nil {
				var apiErr *openai.Error
				if errors.As(err, &apiErr) {
					t.Fatalf("%v: %s", err, apiErr.RawJSON())
				}
				t.Fatal(err)
			}
			if !strings.Contains(answer.OutputText(), "(tool result: ") || !strings.Contains(answer.OutputText(), "rain") {
				t.Errorf("answer %q, want it to quote the tool result", answer.OutputText())
			}
		})
	}
}

// checkResponseObject checks a response object's shape as the SDKs read
// it.
func checkResponseObject(t *testing.T, r gjson.Result, model, status string) {
	t.Helper()
	if !strings.HasPrefix(r.Get("id").Str, "resp_") || r.Get("object").Str != "response" || r.Get("created_at").Int() <= 0 ||
		r.Get("status").Str != status || r.Get("model").Str != model || !r.Get("output").IsArray() ||
		r.Get("usage.total_tokens").Int() != r.Get("usage.input_tokens").Int()+r.Get("usage.output_tokens").Int() ||
		!r.Get("usage.input_tokens_details.cached_tokens").Exists() || !r.Get("usage.output_tokens_details.reasoning_tokens").Exists() {
		t.Fatalf("response object %s", r.Raw)
	}
	r.Get("output").ForEach(func(_, item gjson.Result) bool {
		if item.Get("id").Str == "" || item.Get("status").Str != "completed" {
			t.Errorf("output item %s", item.Raw)
		}
		return true
	})
}

// responsesSequence checks a Responses stream's event order
// (response.created, response.in_progress; per item output_item.added,
// its part or argument events, output_item.done; response.completed last),
// consecutive sequence numbers from 0, and that each item's deltas add up
// to its done text or arguments; it returns the completed response, whose
// output must equal the items done.
func responsesSequence(t *testing.T, evs []sseEvent) gjson.Result {
	t.Helper()
	state := "start"
	var acc strings.Builder
	var done []string
	var final gjson.Result
	for i, ev := range evs {
		d := gjson.Parse(ev.data)
		typ := d.Get("type").Str
		if d.Get("sequence_number").Int() != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %d", i, typ, d.Get("sequence_number").Int())
		}
		bad := false
		switch typ {
		case "response.created":
			bad = state != "start" || d.Get("response.status").Str != "in_progress"
			state = "created"
		case "response.in_progress":
			bad = state != "created"
			state = "response"
		case "response.output_item.added":
			bad = state != "response" || d.Get("output_index").Int() != int64(len(done))
			acc.Reset()
			state = "item " + d.Get("item.type").Str
		case "response.content_part.added":
			bad = state != "item message"
			state = "part"
		case "response.output_text.delta":
			bad = state != "part"
			acc.WriteString(d.Get("delta").Str)
		case "response.output_text.done":
			bad = state != "part" || d.Get("text").Str != acc.String()
			state = "text done"
		case "response.content_part.done":
			bad = state != "text done" || d.Get("part.text").Str != acc.String()
			state = "item message done"
		case "response.function_call_arguments.delta":
			bad = state != "item function_call"
			acc.WriteString(d.Get("delta").Str)
		case "response.function_call_arguments.done":
			bad = state != "item function_call" || d.Get("arguments").Str != acc.String() || d.Get("name").Str == ""
			state = "item function_call done"
		case "response.output_item.done":
			bad = state != "item message done" && state != "item function_call done"
			done = append(done, d.Get("item").Raw)
			state = "response"
		case "response.completed":
			bad = state != "response"
			final = d.Get("response")
			state = "completed"
		default:
			bad = true
		}
		if bad {
			t.Fatalf("event %s out of sequence (after %s): %s", typ, state, ev.data)
		}
	}
	if state != "completed" {
		t.Fatalf("stream ended after %s, want response.completed", state)
	}
	var items []string
	final.Get("output").ForEach(func(_, it gjson.Result) bool {
		items = append(items, it.Raw)
		return true
	})
	if strings.Join(items, ",") != strings.Join(done, ",") {
		t.Errorf("completed output %s, items done %v", final.Get("output").Raw, done)
	}
	return final
}

// checkResponsesUsage checks the usage event of request id (the *n-th
// request): published for /v1/responses with the provider's counts, which
// the response reported (usage), billed at the model's price.
func checkResponsesUsage(t *testing.T, a *acctRig, n *int, id, model string, usage gjson.Result) {
	t.Helper()
	var ev *usagev1.UsageEvent
	for _, e := range a.events(t, *n) {
		if e.RequestId == id {
			ev = e
		}
	}
	if ev == nil {
		t.Fatalf("no usage event for request %s", id)
	}
	if ev.RequestedModel != model || ev.Endpoint != "/v1/responses" || ev.StatusCode != 200 || ev.Estimated ||
		ev.PromptTokens == 0 || ev.CompletionTokens == 0 {
		t.Fatalf("usage event model %s endpoint %s status %d estimated %v tokens %d/%d",
			ev.RequestedModel, ev.Endpoint, ev.StatusCode, ev.Estimated, ev.PromptTokens, ev.CompletionTokens)
	}
	if uint64(usage.Get("input_tokens").Int()) != ev.PromptTokens || uint64(usage.Get("output_tokens").Int()) != ev.CompletionTokens ||
		uint64(usage.Get("input_tokens_details.cached_tokens").Int()) != ev.CachedTokens ||
		uint64(usage.Get("output_tokens_details.reasoning_tokens").Int()) != ev.ReasoningTokens {
		t.Errorf("response usage %s, usage event %d/%d cached %d reasoning %d", usage.Raw,
			ev.PromptTokens, ev.CompletionTokens, ev.CachedTokens, ev.ReasoningTokens)
	}
	price, ok := pricing.Default().Lookup("mock-gpt") // what priceTranslated serves
	if !ok {
		t.Fatal("no price for mock-gpt")
	}
	want := price.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens,
		CachedTokens: ev.CachedTokens, ReasoningTokens: ev.ReasoningTokens})
	if want <= 0 || ev.CostNanoUsd != want {
		t.Errorf("cost %d, want %d", ev.CostNanoUsd, want)
	}
}

// TestResponsesTranslatedCut: a translated stream the provider cuts after
// two chunks ends with a Responses error event numbered after the events
// sent, and is billed by the existing accounting path exactly as the same
// cut is on /v1/chat/completions. The anthropic kind carries the mock's
// per-request behaviour upstream (the gemini and bedrock translations drop
// unknown members, and client headers never reach a provider).
func TestResponsesTranslatedCut(t *testing.T) {
	a := sdkRigAt(t, "", priceTranslated)
	tok := a.token(nil)
	cut := func(path, body string, check func(evs []sseEvent)) *usagev1.UsageEvent {
		resp := a.post(path, tok, body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, readBody(t, resp))
		}
		id := resp.Header.Get("X-Request-Id")
		check(readEvents(t, resp.Body))
		resp.Body.Close()
		return a.eventOf(t, id)
	}
	got := cut("/v1/responses", `{"model":"claude-mock","stream":true,"input":"hello there","mock":{"cut_after":2}}`, func(evs []sseEvent) {
		last := gjson.Parse(evs[len(evs)-1].data)
		if last.Get("type").Str != "error" || last.Get("code").Str != "upstream_stream_cut" || last.Get("sequence_number").Int() != int64(len(evs)-1) {
			t.Fatalf("last event %s of %d", evs[len(evs)-1].data, len(evs))
		}
	})
	want := cut("/v1/chat/completions", `{"model":"claude-mock","stream":true,"messages":[{"role":"user","content":"hello there"}],"mock":{"cut_after":2}}`, func(evs []sseEvent) {
		if !strings.Contains(evs[len(evs)-1].data, "upstream_stream_cut") {
			t.Fatalf("chat's last event %s", evs[len(evs)-1].data)
		}
	})
	if got.ErrorType != "upstream_stream_cut" || got.Estimated != want.Estimated || got.StatusCode != want.StatusCode || got.ErrorType != want.ErrorType ||
		got.PromptTokens != want.PromptTokens || got.CompletionTokens != want.CompletionTokens || got.CostNanoUsd != want.CostNanoUsd || got.CostNanoUsd <= 0 {
		t.Errorf("responses: estimated %v status %d %s tokens %d/%d cost %d; chat: estimated %v status %d %s tokens %d/%d cost %d",
			got.Estimated, got.StatusCode, got.ErrorType, got.PromptTokens, got.CompletionTokens, got.CostNanoUsd,
			want.Estimated, want.StatusCode, want.ErrorType, want.PromptTokens, want.CompletionTokens, want.CostNanoUsd)
	}
}

// TestResponsesHedgeSkipsTranslated: a hedged model whose second target
// would serve a Responses request by translation (an openai preset without
// the Responses API) makes no second call, since translated calls are not
// hedged: the slow native target answers. The same target alone serves
// the request by translation, through chat completions.
func TestResponsesHedgeSkipsTranslated(t *testing.T) {
	slow := mockllm.New(mockllm.Config{Latency: 300 * time.Millisecond})
	sln := listen(t)
	go func() { _ = slow.Serve(sln) }()
	t.Cleanup(func() { _ = slow.Shutdown() })
	fast, fastURL := secondMock(t)
	r := newRig(t, func(c *config.Config) {
		addProvider(c, "slow", "http://"+sln.Addr().String()+"/v1")
		addProvider(c, "fast", fastURL)
		c.Providers[len(c.Providers)-1].Preset = "deepseek"
		c.Models = append(c.Models, config.Model{Name: "hedged", Strategy: config.StrategyOrdered,
			Targets: []config.Target{{Provider: "slow", Model: "s"}, {Provider: "fast", Model: "f"}},
			Hedge:   config.Hedge{After: "50ms"}},
			config.Model{Name: "deepseek-mock", Targets: []config.Target{{Provider: "fast", Model: "f"}}})
		c.ApplyDefaults()
	})
	for _, stream := range []bool{false, true} {
		t.Run(streamName(stream), func(t *testing.T) {
			resp := r.post("/v1/responses", r.token(nil), fmt.Sprintf(`{"model":"hedged","input":"hi","stream":%v}`, stream))
			body := readBody(t, resp)
			if resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Provider") != "slow" || resp.Header.Get("X-Tollgate-Hedged") == "true" {
				t.Errorf("status %d provider %q hedged %q: %.200s", resp.StatusCode, resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Hedged"), body)
			}
			if s := fast.Stats(); s.Requests != 0 {
				t.Errorf("the translated target was called: %+v", s)
			}
		})
	}
	resp := r.post("/v1/responses", r.token(nil), `{"model":"deepseek-mock","input":"hi"}`)
	body := readBody(t, resp)
	if s := fast.Stats(); resp.StatusCode != 200 || gjson.GetBytes(body, "output.0.content.0.text").Str == "" || s.Chat != 1 || s.Responses != 0 {
		t.Errorf("status %d, upstream %+v: %s", resp.StatusCode, s, body)
	}
}

// TestCodexRequestTranslated sends the Codex CLI's first request
// (testdata/codex_first_request.json, as codex exec 0.169.0 sends it, texts
// shortened: developer messages, 8 function tools, a namespace tool
// group, web_search, reasoning.summary, store false, include
// reasoning.encrypted_content, prompt_cache_key, client_metadata) to
// models served by translation on each kind. With web_search it is
// refused naming the tool (Codex's config turns it off); without, it is a
// well-formed stream, the tool group and every Codex-only member stay
// behind, and the prompt, which names exec_command, makes the mock call it;
// its output sent back is quoted by the answer. Each request is billed.
func TestCodexRequestTranslated(t *testing.T) {
	up, _ := newRecordingUpstream(t)
	a := sdkRigAt(t, "http://"+up.addr, priceTranslated)
	first, err := os.ReadFile(filepath.Join("testdata", "codex_first_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	var req map[string]any
	decode(t, first, &req)
	tools := req["tools"].([]any)
	withSearch := tools[len(tools)-1].(map[string]any)
	if withSearch["type"] != "web_search" {
		t.Fatalf("the fixture's last tool is %v, want web_search", withSearch)
	}
	tok := a.token(nil)
	n := 0
	for _, model := range translatedModels {
		t.Run(model, func(t *testing.T) {
			req["model"], req["tools"] = model, tools
			resp := a.post("/v1/responses", tok, encode(t, req))
			body := readBody(t, resp)
			if resp.StatusCode != 400 || gjson.GetBytes(body, "error.param").Str != "tools[8].type" || !strings.Contains(string(body), "web_search") {
				t.Fatalf("with web_search: status %d: %s", resp.StatusCode, body)
			}
			n++
			req["tools"] = tools[:len(tools)-1]
			resp = a.post("/v1/responses", tok, encode(t, req))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			n++
			done := responsesSequence(t, readEvents(t, resp.Body))
			resp.Body.Close()
			_, sent := up.lastRequest(t)
			for _, k := range []string{"multi_agent_v1", "client_metadata", "encrypted_content", "prompt_cache_key", "x-codex", `"store":`} {
				if strings.Contains(sent, k) {
					t.Errorf("%s reached the upstream", k)
				}
			}
			call := done.Get("output.0")
			if call.Get("type").Str != "function_call" || call.Get("name").Str != "exec_command" || gjson.Get(call.Get("arguments").Str, "cmd").Str == "" {
				t.Fatalf("output %s, want an exec_command call with a cmd", done.Get("output").Raw)
			}
			checkResponsesUsage(t, a, &n, resp.Header.Get("X-Request-Id"), model, done.Get("usage"))

			// Codex sends the call and its output back, with its history.
			next := map[string]any{}
			for k, v := range req {
				next[k] = v
			}
			var item any
			decode(t, []byte(call.Raw), &item)
			next["input"] = append(append([]any(nil), req["input"].([]any)...), item,
				map[string]any{"type": "function_call_output", "call_id": call.Get("call_id").Str, "output": "Exit code: 0\nOutput:\nmain.go"})
			resp = a.post("/v1/responses", tok, encode(t, next))
			if resp.StatusCode != 200 {
				t.Fatalf("second turn: status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			n++
			done = responsesSequence(t, readEvents(t, resp.Body))
			resp.Body.Close()
			if text := done.Get("output.0.content.0.text").Str; !strings.Contains(text, "main.go") {
				t.Fatalf("final answer %s, want it to quote the command's output", done.Get("output").Raw)
			}
			checkResponsesUsage(t, a, &n, resp.Header.Get("X-Request-Id"), model, done.Get("usage"))
		})
	}
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func encode(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
