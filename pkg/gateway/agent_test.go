package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/toolrunner"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
)

// Agent loops through the gateway with the official SDKs (issue #16): the
// model calls a tool with arguments valid for its schema, the tool's
// result goes back, and the final answer quotes it. The mock decides as
// its tools.go says: the prompt names the tool.

const agentPrompt = "What is the weather in Paris? Use get_weather."

// weatherInput is the get_weather tool's input.
type weatherInput struct {
	City string `json:"city" jsonschema:"required,description=The city name"`
	Unit string `json:"unit" jsonschema:"required,enum=celsius,enum=fahrenheit"`
}

// weather is the tool: its result names the city, so the final answer
// shows that the arguments reached it.
func weather(in weatherInput) string {
	return fmt.Sprintf("sunny, 18 degrees %s in %s", in.Unit, in.City)
}

var weatherParams = openai.FunctionParameters{
	"type": "object",
	"properties": map[string]any{
		"city": map[string]any{"type": "string"},
		"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
	},
	"required":             []string{"city", "unit"},
	"additionalProperties": false,
}

func TestOpenAISDKAgentLoop(t *testing.T) {
	r := sdkRig(t)
	ctx := context.Background()
	client := openai.NewClient(ooption.WithBaseURL(r.url+"/v1/"), ooption.WithAPIKey(r.token(nil)), ooption.WithMaxRetries(0))
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "get_weather", Strict: openai.Bool(true), Parameters: weatherParams,
	})}
	for _, model := range []string{"mock-gpt", "claude-mock", "gemini-mock", "bedrock-mock"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream %v", model, stream), func(t *testing.T) {
				params := openai.ChatCompletionNewParams{Model: model, Tools: tools,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(agentPrompt)}}
				msg := openAITurn(t, ctx, client, params, stream)
				if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
					t.Fatalf("first turn %+v, want a get_weather call", msg)
				}
				call := msg.ToolCalls[0]
				var in weatherInput
				if err := json.Unmarshal([]byte(call.Function.Arguments), &in); err != nil || in.City == "" || in.Unit != "celsius" {
					t.Fatalf("arguments %q: %v", call.Function.Arguments, err)
				}
				result := weather(in)
				params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(result, call.ID))
				final := openAITurn(t, ctx, client, params, stream)
				if len(final.ToolCalls) != 0 || !strings.Contains(final.Content, result) {
					t.Errorf("final answer %q, want it to quote %q", final.Content, result)
				}
			})
		}
	}
}

// openAITurn makes one chat call, streamed through the SDK's accumulator
// or not, and returns the assistant message.
func openAITurn(t *testing.T, ctx context.Context, client openai.Client, params openai.ChatCompletionNewParams, stream bool) openai.ChatCompletionMessage {
	t.Helper()
	if !stream {
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Choices[0].Message
	}
	s := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	finished := 0
	for s.Next() {
		acc.AddChunk(s.Current())
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(acc.Choices[0].Message.ToolCalls); finished != n {
		t.Errorf("JustFinishedToolCall saw %d of %d calls", finished, n)
	}
	return acc.Choices[0].Message
}

func TestAnthropicSDKToolRunner(t *testing.T) {
	r := sdkRig(t)
	ctx := context.Background()
	client := anthropicsdk.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(r.token(nil)), aoption.WithMaxRetries(0))
	var got []weatherInput
	tool, err := toolrunner.NewBetaToolFromJSONSchema("get_weather", "The weather in a city",
		func(_ context.Context, in weatherInput) (anthropicsdk.BetaToolResultBlockParamContentUnion, error) {
			got = append(got, in)
			return anthropicsdk.BetaToolResultBlockParamContentUnion{OfText: &anthropicsdk.BetaTextBlockParam{Text: weather(in)}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"mock-gpt", "claude-mock", "gemini-mock", "bedrock-mock"} { // translated, native, translated twice
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream %v", model, stream), func(t *testing.T) {
				got = nil
				params := anthropicsdk.BetaToolRunnerParams{DisableThread: true, MaxIterations: 4, BetaMessageNewParams: anthropicsdk.BetaMessageNewParams{
					Model: anthropicsdk.Model(model), MaxTokens: 256,
					Messages: []anthropicsdk.BetaMessageParam{anthropicsdk.NewBetaUserMessage(anthropicsdk.NewBetaTextBlock(agentPrompt))},
				}}
				var final string
				var input int64
				if stream {
					// The text deltas of every turn: the first one has none.
					runner := client.Beta.Messages.NewToolRunnerStreaming([]anthropicsdk.BetaTool{tool}, params)
					for events, err := range runner.AllStreaming(ctx) {
						if err != nil {
							t.Fatal(err)
						}
						for ev, err := range events {
							if err != nil {
								t.Fatal(err)
							}
							switch ev.Type {
							case "message_start":
								input = ev.Message.Usage.InputTokens
							case "content_block_delta":
								final += ev.Delta.Text
							}
						}
					}
					if input <= 0 {
						t.Errorf("message_start input_tokens %d", input)
					}
				} else {
					msg, err := client.Beta.Messages.NewToolRunner([]anthropicsdk.BetaTool{tool}, params).RunToCompletion(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if msg.StopReason != "end_turn" || len(msg.Content) == 0 {
						t.Fatalf("final message %+v", msg)
					}
					final = msg.Content[0].Text
				}
				if len(got) != 1 || got[0].City == "" || got[0].Unit != "celsius" {
					t.Fatalf("tool inputs %+v, want one valid call", got)
				}
				if want := weather(got[0]); !strings.Contains(final, want) {
					t.Errorf("final answer %q, want it to quote %q", final, want)
				}
			})
		}
	}
}
