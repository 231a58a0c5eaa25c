package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/providers/bedrock"
	"github.com/tollgate/tollgate/pkg/providers/gemini"
)

// askingValues are values of each member that ask for something (not null,
// not neutral), for the members some kind refuses.
var askingValues = map[providers.ChatParam]string{
	providers.ParamN:                `2`,
	providers.ParamPresencePenalty:  `0.5`,
	providers.ParamFrequencyPenalty: `-0.5`,
	providers.ParamLogitBias:        `{"50256":-100}`,
	providers.ParamLogprobs:         `true`,
	providers.ParamTopLogprobs:      `2`,
	providers.ParamResponseFormat:   `{"type":"json_object"}`,
	providers.ParamFunctions:        `[{"name":"f","parameters":{"type":"object"}}]`,
	providers.ParamFunctionCall:     `"auto"`,
	providers.ParamReasoningEffort:  `"high"`,
	providers.ParamModalities:       `["text","audio"]`,
	providers.ParamAudio:            `{"voice":"alloy","format":"wav"}`,
	providers.ParamPrediction:       `{"type":"content","content":"x"}`,
	providers.ParamWebSearchOptions: `{}`,
}

// neutralValues are values of the same members that ask for nothing.
var neutralValues = map[providers.ChatParam]string{
	providers.ParamN:                `1`,
	providers.ParamPresencePenalty:  `0`,
	providers.ParamFrequencyPenalty: `0`,
	providers.ParamLogitBias:        `{}`,
	providers.ParamLogprobs:         `false`,
	providers.ParamTopLogprobs:      `0`,
	providers.ParamResponseFormat:   `{"type":"text"}`,
	providers.ParamModalities:       `["text"]`,
}

// TestChatPolicyRefusals drives /v1/chat/completions from each translating
// kind's Policy: every member it refuses, sent with a value that asks for
// something, is a 400 unsupported_parameter naming the member and the
// upstream; sent null, or neutral, it passes.
func TestChatPolicyRefusals(t *testing.T) {
	a := sdkRigAt(t, "")
	tok := a.token(nil)
	for model, pol := range map[string]*providers.ChatPolicy{
		"claude-mock": anthropic.Policy, "gemini-mock": gemini.Policy, "bedrock-mock": bedrock.Policy,
	} {
		for _, r := range pol.Rules() {
			if r.Action != providers.Refuse {
				continue
			}
			name := r.Param.String()
			t.Run(model+" "+name, func(t *testing.T) {
				v, ok := askingValues[r.Param]
				if !ok {
					t.Fatalf("no asking value for %s: add one to askingValues", name)
				}
				body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"` + name + `":`
				resp := a.post("/v1/chat/completions", tok, body+v+`}`)
				got := readBody(t, resp)
				if resp.StatusCode != 400 {
					t.Fatalf("status %d, want 400: %s", resp.StatusCode, got)
				}
				msg := errorShape(t, got, typeInvalidRequest, "unsupported_parameter")
				if p := gjson.GetBytes(got, "error.param").Str; p != name {
					t.Errorf("param %q, want %q", p, name)
				}
				if !strings.Contains(msg, name) || !strings.Contains(msg, pol.Upstream) {
					t.Errorf("message %q names neither %s nor %s", msg, name, pol.Upstream)
				}
				passes := []string{"null"}
				if n, ok := neutralValues[r.Param]; ok {
					passes = append(passes, n)
				}
				for _, v := range passes {
					resp := a.post("/v1/chat/completions", tok, body+v+`}`)
					if got := readBody(t, resp); resp.StatusCode != 200 {
						t.Errorf("%s %s: status %d, want 200: %s", name, v, resp.StatusCode, got)
					}
				}
			})
		}
	}
}
