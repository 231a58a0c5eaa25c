package anthropic

import (
	"fmt"

	"github.com/tollgate/tollgate/pkg/rawjson"

	"github.com/tollgate/tollgate/pkg/providers"
)

// usage is Anthropic's usage object as reported so far. Prompt tokens in
// the OpenAI sense are input + cache creation + cache reads.
type usage struct {
	input, cacheCreation, cacheRead, output uint64
	reported                                bool
	counts                                  providers.Counts // every count read, over the events so far
}

// update reads a raw usage object; members it lacks keep their value
// (message_delta may carry only output_tokens). A member that is not a
// count (providers.Count) spoils the whole usage.
func (u *usage) update(raw string) {
	if len(raw) == 0 || raw[0] != '{' {
		return
	}
	u.reported = true
	for _, m := range [...]struct {
		name string
		n    *uint64
	}{{"input_tokens", &u.input}, {"cache_creation_input_tokens", &u.cacheCreation}, {"cache_read_input_tokens", &u.cacheRead}, {"output_tokens", &u.output}} {
		if v := member(raw, m.name); v != "" {
			*m.n = u.counts.Read(v)
		}
	}
}

// providers returns the usage in the gateway's terms (none when a count
// was bad, or the prompt's parts sum past 2^64-1). Anthropic does not
// report thinking tokens apart from output tokens: Reasoning stays 0.
func (u *usage) providers() providers.Usage {
	c := u.counts // the sum is checked on a copy: providers may be called again
	prompt := c.Sum(c.Sum(u.input, u.cacheCreation), u.cacheRead)
	if !c.OK() {
		return providers.Usage{}
	}
	return providers.Usage{
		Prompt:     prompt,
		Completion: u.output,
		Cached:     u.cacheRead,
		CacheWrite: u.cacheCreation,
		Reported:   u.reported,
	}
}

// appendOpenAIUsage appends an OpenAI usage object.
func appendOpenAIUsage(dst []byte, u providers.Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = appendUint(dst, u.Prompt)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendUint(dst, u.Completion)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendUint(dst, u.Prompt+u.Completion)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = appendUint(dst, u.Cached)
	dst = append(dst, `},"completion_tokens_details":{"reasoning_tokens":`...)
	dst = appendUint(dst, u.Reasoning)
	return append(dst, "}}"...)
}

// finishReason maps a raw stop_reason token to a quoted OpenAI finish
// reason. Unknown reasons (and pause_turn, which only server tools cause)
// map to "stop".
func finishReason(stopRaw string) string {
	switch stopRaw {
	case `"max_tokens"`, `"model_context_window_exceeded"`:
		return `"length"`
	case `"tool_use"`:
		return `"tool_calls"`
	case `"refusal"`:
		return `"content_filter"`
	}
	return `"stop"`
}

// Response translates an Anthropic message into an OpenAI chat.completion:
// text blocks joined into content, thinking blocks into reasoning_content,
// tool_use blocks into tool_calls.
func (p *Provider) Response(dst, body []byte, c *providers.Call) ([]byte, providers.Usage, error) {
	if !providers.ValidJSON(body) {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: body is not JSON", p.name, providers.ErrMalformed)
	}
	s := bytesString(body)
	content := member(s, "content")
	if len(content) == 0 || content[0] != '[' {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: message has no content array", p.name, providers.ErrMalformed)
	}
	var u usage
	u.update(member(s, "usage"))
	dst = append(dst, `{"id":"chatcmpl-`...)
	dst = rawjson.AppendRawBody(dst, inner(member(s, "id")))
	dst = append(dst, `","object":"chat.completion","created":`...)
	dst = appendUint(dst, uint64(p.now().Unix()))
	dst = append(dst, `,"model":`...)
	if m := member(s, "model"); isString(m) {
		dst = rawjson.AppendRawString(dst, m)
	} else if c != nil {
		dst = rawjson.AppendString(dst, c.Model)
	} else {
		dst = append(dst, `""`...)
	}
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	dst = appendBlockText(dst, content, `"text"`, "text", "null")
	dst = append(dst, `,"refusal":null`...)
	if hasBlock(content, `"thinking"`) {
		dst = append(dst, `,"reasoning_content":`...)
		dst = appendBlockText(dst, content, `"thinking"`, "thinking", `""`)
	}
	dst = appendToolCalls(dst, content)
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = append(dst, finishReason(member(s, "stop_reason"))...)
	dst = append(dst, "}]"...)
	pu := u.providers()
	if pu.Reported {
		dst = append(dst, `,"usage":`...)
		dst = appendOpenAIUsage(dst, pu)
	}
	return append(dst, '}'), pu, nil
}

// hasBlock reports whether content has a block of the raw type typ.
func hasBlock(content, typ string) bool {
	found := false
	forEachRaw(content, func(_ int, b string) bool {
		found = member(b, "type") == typ
		return !found
	})
	return found
}

// appendBlockText appends the text of every block of type typ, joined, as
// one JSON string, or none when there is no such block.
func appendBlockText(dst []byte, content, typ, key, none string) []byte {
	if !hasBlock(content, typ) {
		return append(dst, none...)
	}
	dst = append(dst, '"')
	forEachRaw(content, func(_ int, b string) bool {
		if member(b, "type") == typ {
			dst = rawjson.AppendRawBody(dst, inner(member(b, key)))
		}
		return true
	})
	return append(dst, '"')
}

// appendToolCalls appends the tool_calls member for the tool_use blocks.
func appendToolCalls(dst []byte, content string) []byte {
	n := 0
	forEachRaw(content, func(_ int, b string) bool {
		if member(b, "type") != `"tool_use"` {
			return true
		}
		if n == 0 {
			dst = append(dst, `,"tool_calls":[`...)
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"id":`...)
		dst = rawjson.AppendRawString(dst, member(b, "id"))
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = rawjson.AppendRawString(dst, member(b, "name"))
		dst = append(dst, `,"arguments":`...)
		input := member(b, "input")
		if input == "" {
			input = "{}"
		}
		dst = rawjson.AppendString(dst, input)
		dst = append(dst, "}}"...)
		return true
	})
	if n > 0 {
		dst = append(dst, ']')
	}
	return dst
}
