package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/config"
)

// sdkRig serves mock-gpt from an OpenAI-format upstream and claude-mock
// from an Anthropic-format upstream (both the mock), with accounting and
// API keys.
func sdkRig(t *testing.T) *acctRig { return sdkRigAt(t, "") }

// sdkRigAt is sdkRig with every provider on the server at base ("" for
// the rig's mock); more adjust its config further.
func sdkRigAt(t *testing.T, base string, more ...func(*config.Config)) *acctRig {
	return newAcctRig(t, func(c *config.Config) {
		if base != "" {
			c.Providers[0].BaseURL = base + "/v1"
		}
		base = strings.TrimSuffix(c.Providers[0].BaseURL, "/v1")
		c.Providers = append(c.Providers, config.Provider{Name: "claude", Kind: config.KindAnthropic, BaseURL: base, APIKey: testProvKey,
			Timeouts: c.Providers[0].Timeouts, MaxConns: 64})
		c.Models = append(c.Models, config.Model{Name: "claude-mock", Type: "chat", Targets: []config.Target{{Provider: "claude"}}})
		tm := c.Providers[0].Timeouts
		c.Providers = append(c.Providers,
			config.Provider{Name: "gem", Kind: config.KindGemini, BaseURL: base, APIKey: testProvKey, Timeouts: tm},
			config.Provider{Name: "aws", Kind: config.KindBedrock, BaseURL: base, Region: "us-east-1", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: testProvKey, Timeouts: tm},
			config.Provider{Name: "az", Kind: config.KindAzure, BaseURL: base, APIVersion: "2024-10-21", APIKey: testProvKey, Timeouts: tm})
		c.Models = append(c.Models,
			config.Model{Name: "gemini-mock", Type: "chat", Targets: []config.Target{{Provider: "gem"}}},
			config.Model{Name: "bedrock-mock", Type: "chat", Targets: []config.Target{{Provider: "aws"}}},
			config.Model{Name: "azure-mock", Type: "chat", Targets: []config.Target{{Provider: "az"}}})
		for _, f := range more {
			f(c)
		}
		c.ApplyDefaults()
	})
}

// sdkCredentials are the two ways a caller authenticates: a JWT and an
// API key (issue #14); the SDK tests run with each.
func sdkCredentials(t *testing.T, a *acctRig) []struct{ name, token string } {
	key, _ := a.createKey(t, apikey.Key{Subject: "alice", Dept: "research", Team: "nlp", Name: "sdk"})
	return []struct{ name, token string }{{"jwt", a.token(nil)}, {"api key", key}}
}

func TestOpenAISDK(t *testing.T) {
	a := sdkRig(t)
	for _, cred := range sdkCredentials(t, a) {
		t.Run(cred.name, func(t *testing.T) { testOpenAISDK(t, a.rig, cred.token) })
	}
}

func testOpenAISDK(t *testing.T, r *rig, token string) {
	ctx := context.Background()
	client := openai.NewClient(ooption.WithBaseURL(r.url+"/v1/"), ooption.WithAPIKey(token), ooption.WithMaxRetries(0))
	for _, model := range []string{"mock-gpt", "claude-mock", "gemini-mock", "bedrock-mock", "azure-mock"} {
		t.Run(model, func(t *testing.T) {
			params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")}}
			resp, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Usage.CompletionTokens == 0 {
				t.Fatalf("completion %+v", resp)
			}
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			acc := openai.ChatCompletionAccumulator{}
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Choices[0].Message.Content != resp.Choices[0].Message.Content || acc.Usage.CompletionTokens == 0 {
				t.Errorf("streamed %q (usage %d), non-stream %q", acc.Choices[0].Message.Content, acc.Usage.CompletionTokens, resp.Choices[0].Message.Content)
			}
		})
	}
	for _, model := range []string{"mock-gpt", "claude-mock", "gemini-mock", "bedrock-mock"} {
		t.Run("tool call "+model, func(t *testing.T) {
			testToolCall(t, client, model)
		})
	}
	t.Run("errors", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Errorf("unknown model: %v", err)
		}
		bad := openai.NewClient(ooption.WithBaseURL(r.url+"/v1/"), ooption.WithAPIKey("not-a-token"), ooption.WithMaxRetries(0))
		_, err = bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "mock-gpt", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
			t.Errorf("bad token: %v", err)
		}
	})
}

func TestAnthropicSDK(t *testing.T) {
	a := sdkRig(t)
	for _, cred := range sdkCredentials(t, a) {
		t.Run(cred.name, func(t *testing.T) { testAnthropicSDK(t, a.rig, cred.token) })
	}
}

func testAnthropicSDK(t *testing.T, r *rig, token string) {
	ctx := context.Background()
	// The SDK sends the token as x-api-key, as ANTHROPIC_API_KEY does.
	client := anthropicsdk.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(token), aoption.WithMaxRetries(0))
	for _, model := range []string{"mock-gpt", "claude-mock", "gemini-mock", "bedrock-mock"} { // translated, native, translated twice
		t.Run(model, func(t *testing.T) {
			params := anthropicsdk.MessageNewParams{Model: anthropicsdk.Model(model), MaxTokens: 64,
				Messages: []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("hello there"))}}
			msg, err := client.Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.Usage.OutputTokens == 0 || msg.StopReason != "end_turn" {
				t.Fatalf("message %+v", msg)
			}
			stream := client.Messages.NewStreaming(ctx, params)
			acc := anthropicsdk.Message{}
			var kinds []string
			for stream.Next() {
				ev := stream.Current()
				kinds = append(kinds, ev.Type)
				if err := acc.Accumulate(ev); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Content[0].Text != msg.Content[0].Text || acc.Usage.OutputTokens == 0 {
				t.Errorf("streamed %q (usage %d), non-stream %q", acc.Content[0].Text, acc.Usage.OutputTokens, msg.Content[0].Text)
			}
			if kinds[0] != "message_start" || kinds[len(kinds)-1] != "message_stop" {
				t.Errorf("event sequence %v", kinds)
			}
		})
	}
	t.Run("tool use", func(t *testing.T) {
		msg, err := client.Messages.New(ctx, anthropicsdk.MessageNewParams{Model: "mock-gpt", MaxTokens: 64,
			Messages: []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("weather?"))},
			Tools: []anthropicsdk.ToolUnionParam{{OfTool: &anthropicsdk.ToolParam{Name: "get_weather",
				InputSchema: anthropicsdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
			ToolChoice: anthropicsdk.ToolChoiceUnionParam{OfAny: &anthropicsdk.ToolChoiceAnyParam{}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != "tool_use" || msg.Content[len(msg.Content)-1].Name != "get_weather" {
			t.Errorf("tool use answer %+v", msg)
		}
	})
	t.Run("errors are Anthropic-shaped", func(t *testing.T) {
		_, err := client.Messages.New(ctx, anthropicsdk.MessageNewParams{Model: "nope", MaxTokens: 8,
			Messages: []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("x"))}})
		var apiErr *anthropicsdk.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.RawJSON(), `"not_found_error"`) {
			t.Errorf("unknown model: %v", err)
		}
	})
	t.Run("count tokens", func(t *testing.T) {
		n, err := client.Messages.CountTokens(ctx, anthropicsdk.MessageCountTokensParams{Model: "mock-gpt",
			Messages: []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("hello there"))}})
		if err != nil || n.InputTokens <= 0 {
			t.Errorf("count tokens: %+v %v", n, err)
		}
	})
}

// testToolCall asks model for a forced tool call through the OpenAI SDK.
func testToolCall(t *testing.T, client openai.Client, model string) {
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
	})
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			t.Fatalf("%v: %s", err, apiErr.RawJSON())
		}
		t.Fatal(err)
	}
	if tc := resp.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Name != "get_weather" || resp.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool call answer %+v", resp.Choices[0])
	}
}
