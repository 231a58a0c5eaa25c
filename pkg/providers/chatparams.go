package providers

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tollgate/tollgate/pkg/rawjson"
)

// ChatParam is a top-level member of an OpenAI chat-completions request
// (and the few non-OpenAI members a translation honours: top_k, thinking,
// mock). Every translating kind states what it does with each one in its
// ChatPolicy.
type ChatParam uint8

// The members of a chat-completions request, in the order the docs list
// them.
const (
	ParamModel ChatParam = iota
	ParamMessages
	ParamStream
	ParamStreamOptions
	ParamMaxTokens
	ParamMaxCompletionTokens
	ParamTemperature
	ParamTopP
	ParamTopK
	ParamN
	ParamStop
	ParamPresencePenalty
	ParamFrequencyPenalty
	ParamLogitBias
	ParamLogprobs
	ParamTopLogprobs
	ParamSeed
	ParamResponseFormat
	ParamTools
	ParamToolChoice
	ParamParallelToolCalls
	ParamFunctions
	ParamFunctionCall
	ParamReasoningEffort
	ParamThinking
	ParamVerbosity
	ParamModalities
	ParamAudio
	ParamPrediction
	ParamWebSearchOptions
	ParamUser
	ParamSafetyIdentifier
	ParamPromptCacheKey
	ParamMetadata
	ParamStore
	ParamServiceTier
	ParamMock
	numChatParams
)

// chatParamNames are the members' names as the client writes them.
var chatParamNames = [numChatParams]string{
	ParamModel:               "model",
	ParamMessages:            "messages",
	ParamStream:              "stream",
	ParamStreamOptions:       "stream_options",
	ParamMaxTokens:           "max_tokens",
	ParamMaxCompletionTokens: "max_completion_tokens",
	ParamTemperature:         "temperature",
	ParamTopP:                "top_p",
	ParamTopK:                "top_k",
	ParamN:                   "n",
	ParamStop:                "stop",
	ParamPresencePenalty:     "presence_penalty",
	ParamFrequencyPenalty:    "frequency_penalty",
	ParamLogitBias:           "logit_bias",
	ParamLogprobs:            "logprobs",
	ParamTopLogprobs:         "top_logprobs",
	ParamSeed:                "seed",
	ParamResponseFormat:      "response_format",
	ParamTools:               "tools",
	ParamToolChoice:          "tool_choice",
	ParamParallelToolCalls:   "parallel_tool_calls",
	ParamFunctions:           "functions",
	ParamFunctionCall:        "function_call",
	ParamReasoningEffort:     "reasoning_effort",
	ParamThinking:            "thinking",
	ParamVerbosity:           "verbosity",
	ParamModalities:          "modalities",
	ParamAudio:               "audio",
	ParamPrediction:          "prediction",
	ParamWebSearchOptions:    "web_search_options",
	ParamUser:                "user",
	ParamSafetyIdentifier:    "safety_identifier",
	ParamPromptCacheKey:      "prompt_cache_key",
	ParamMetadata:            "metadata",
	ParamStore:               "store",
	ParamServiceTier:         "service_tier",
	ParamMock:                "mock",
}

// chatParamByName finds a member by its name, built once.
var chatParamByName = func() map[string]ChatParam {
	m := make(map[string]ChatParam, numChatParams)
	for p, name := range chatParamNames {
		m[name] = ChatParam(p)
	}
	return m
}()

// String returns the member's name as the client writes it.
func (p ChatParam) String() string {
	if p >= numChatParams {
		return fmt.Sprintf("ChatParam(%d)", uint8(p))
	}
	return chatParamNames[p]
}

// ChatParams returns every member, in the order the docs list them.
func ChatParams() []ChatParam {
	ps := make([]ChatParam, numChatParams)
	for i := range ps {
		ps[i] = ChatParam(i)
	}
	return ps
}

// Action is what a translation does with a request member.
type Action uint8

// The actions of a ChatPolicy.
const (
	// Map: the translation reads the member and sends it as the upstream
	// field(s) Rule.To names (checking its value as it goes).
	Map Action = iota + 1
	// Drop: the member is ignored. Only for members whose absence the
	// client cannot tell from the answer, or that the gateway handles
	// itself; Rule.Note says why.
	Drop
	// Refuse: a value other than null or the member's neutral value (see
	// Neutral) is answered 400 unsupported_parameter naming the member and
	// the upstream.
	Refuse
)

// String names the action as the docs do.
func (a Action) String() string {
	switch a {
	case Map:
		return "map"
	case Drop:
		return "drop"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Rule is one row of a ChatPolicy.
type Rule struct {
	Param  ChatParam
	Action Action
	// To names the upstream field(s) a mapped member becomes, as the docs
	// show it.
	To string
	// Note says why a member is dropped or refused (a refusal's message
	// reads "<member>: <Note>", so it names the upstream), or qualifies a
	// mapping.
	Note string
}

// ChatPolicy is a translating kind's parameter policy: one Rule for every
// ChatParam. Members that are not ChatParams (no OpenAI client sends them)
// are ignored. The policy is data: the reader (Read) acts on it, the
// translator reads only the members it maps, and the Providers page's
// parameter table is generated from it.
type ChatPolicy struct {
	// Kind is the provider kind the policy belongs to ("anthropic").
	Kind string
	// Upstream names the upstream API in messages ("the Anthropic API").
	Upstream string
	rules    []Rule
	actions  [numChatParams]Action
	notes    [numChatParams]string
}

// NewChatPolicy returns the policy of kind from its rules. It panics when a
// ChatParam has no rule or two, or a refusal has no note: a policy is
// package-level data, checked when the program starts.
func NewChatPolicy(kind, upstream string, rules ...Rule) *ChatPolicy {
	p := &ChatPolicy{Kind: kind, Upstream: upstream, rules: rules}
	for _, r := range rules {
		switch {
		case r.Param >= numChatParams:
			panic(fmt.Sprintf("providers: %s policy: unknown parameter %d", kind, r.Param))
		case p.actions[r.Param] != 0:
			panic(fmt.Sprintf("providers: %s policy: %s has two rules", kind, r.Param))
		case r.Action < Map || r.Action > Refuse:
			panic(fmt.Sprintf("providers: %s policy: %s has no action", kind, r.Param))
		case r.Action == Refuse && !strings.Contains(r.Note, upstream):
			panic(fmt.Sprintf("providers: %s policy: the refusal of %s must say why, naming %s", kind, r.Param, upstream))
		}
		p.actions[r.Param] = r.Action
		p.notes[r.Param] = r.Note
	}
	for i, a := range p.actions {
		if a == 0 {
			panic(fmt.Sprintf("providers: %s policy: %s has no rule", kind, ChatParam(i)))
		}
	}
	return p
}

// Rules returns the policy's rules in the order the docs list the
// members.
func (p *ChatPolicy) Rules() []Rule {
	out := make([]Rule, numChatParams)
	for _, r := range p.rules {
		out[r.Param] = r
	}
	return out
}

// Action returns what the policy does with param.
func (p *ChatPolicy) Action(param ChatParam) Action { return p.actions[param] }

// ChatRequest holds the members of a chat request a policy maps, as raw
// JSON pointing into the body.
type ChatRequest struct {
	raw [numChatParams]string
}

// Raw returns the raw JSON value of param ("" when absent, or when the
// policy does not map it).
func (r *ChatRequest) Raw(param ChatParam) string { return r.raw[param] }

// Read fills r from the chat request of c: one pass over the body's
// top-level members, each acted on as the policy says. The body is
// validated first unless the gateway's scan already did. A repeated member
// counts as its last occurrence; members spelled with escapes are read as
// decoded.
func (p *ChatPolicy) Read(r *ChatRequest, c *Call) error {
	if !c.Scanned && !ValidJSON(c.Body) {
		return &ParamError{Param: "body", Message: "body: not valid JSON"}
	}
	body := unsafe.String(unsafe.SliceData(c.Body), len(c.Body))
	if i := rawjson.SkipSpace(body, 0); i >= len(body) || body[i] != '{' {
		return &ParamError{Param: "body", Message: "body: must be a JSON object"}
	}
	var err error
	rawjson.EachMember(body, func(key, val string, _ int) bool {
		param, ok := chatParamByName[key]
		if !ok && strings.IndexByte(key, '\\') >= 0 {
			param, ok = chatParamByName[rawjson.KeyName(key)]
		}
		if !ok {
			return true
		}
		switch p.actions[param] {
		case Map:
			r.raw[param] = val
		case Refuse:
			if !Neutral(param, val) {
				err = &ParamError{Param: chatParamNames[param], Message: chatParamNames[param] + ": " + p.notes[param]}
			}
		}
		return err == nil
	})
	return err
}

// Neutral reports whether raw, a value of param, asks for nothing beyond
// what a request without the member gets: null, and false for logprobs, 0
// for top_logprobs and the penalties, {} for logit_bias, 1 for n, type
// "text" for response_format, and a list of "text" only for modalities. A refused member with a neutral
// value passes, since SDKs send such defaults unasked.
func Neutral(param ChatParam, raw string) bool {
	if raw == "null" {
		return true
	}
	switch param {
	case ParamLogprobs:
		return raw == "false"
	case ParamTopLogprobs, ParamPresencePenalty, ParamFrequencyPenalty:
		return numberIs(raw, 0)
	case ParamN:
		return numberIs(raw, 1)
	case ParamLogitBias:
		empty := len(raw) > 0 && raw[0] == '{'
		rawjson.EachMember(raw, func(string, string, int) bool { empty = false; return false })
		return empty
	case ParamResponseFormat:
		return len(raw) > 0 && raw[0] == '{' && rawjson.Member(raw, "type") == `"text"`
	case ParamModalities:
		text := len(raw) > 0 && raw[0] == '['
		rawjson.EachElem(raw, func(_ int, v string) bool {
			text = v == `"text"`
			return text
		})
		return text
	}
	return false
}

// numberIs reports whether raw is a JSON number token equal to v.
func numberIs(raw string, v float64) bool {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return false
	}
	f, err := strconv.ParseFloat(raw, 64)
	return err == nil && f == v
}
