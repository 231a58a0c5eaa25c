package bedrock

import (
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// Response translates a Converse answer into a chat.completion object
// appended to dst.
func (p *Provider) Response(dst, body []byte, c *providers.Call) ([]byte, providers.Usage, error) {
	if !providers.ValidJSON(body) {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: body is not JSON", p.name, providers.ErrMalformed)
	}
	var output, stopReason, usage gjson.Result
	gjson.Parse(bytesString(body)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "output":
			output = v
		case "stopReason":
			stopReason = v
		case "usage":
			usage = v
		}
		return true
	})
	content := output.Get("message.content")
	if !content.IsArray() {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: no output.message.content", p.name, providers.ErrMalformed)
	}
	u := parseUsage(usage)
	dst = append(dst, `{"id":"`...)
	dst = appendID(dst, c)
	dst = append(dst, `","object":"chat.completion","created":`...)
	dst = appendInt(dst, p.now().Unix())
	dst = append(dst, `,"model":`...)
	dst = rawjson.AppendString(dst, c.Model)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	texts := 0
	content.ForEach(func(_, b gjson.Result) bool {
		if t := b.Get("text"); t.Type == gjson.String {
			if texts == 0 {
				dst = append(dst, '"')
			}
			texts++
			dst = rawjson.AppendRawBody(dst, rawjson.Inner(t.Raw))
		}
		return true
	})
	if texts == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '"')
	}
	dst = append(dst, `,"refusal":null`...)
	tools := 0
	content.ForEach(func(_, b gjson.Result) bool {
		tu := b.Get("toolUse")
		if !tu.IsObject() {
			return true
		}
		if tools == 0 {
			dst = append(dst, `,"tool_calls":[`...)
		} else {
			dst = append(dst, ',')
		}
		tools++
		dst = append(dst, `{"id":`...)
		dst = rawjson.AppendString(dst, tu.Get("toolUseId").String())
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = rawjson.AppendString(dst, tu.Get("name").String())
		dst = append(dst, `,"arguments":`...)
		input := tu.Get("input").Raw
		if input == "" {
			input = "{}"
		}
		dst = rawjson.AppendString(dst, input)
		dst = append(dst, "}}"...)
		return true
	})
	if tools > 0 {
		dst = append(dst, ']')
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, finishReason(stopReason.Str, tools > 0)...)
	dst = append(dst, `"}]`...)
	if u.Reported {
		dst = appendUsage(dst, u)
	}
	return append(dst, '}'), u, nil
}

// finishReason maps a Converse stopReason to an OpenAI finish_reason;
// "tool_calls" needs calls to point at.
func finishReason(stop string, tools bool) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		if tools {
			return "tool_calls"
		}
	case "content_filtered", "guardrail_intervened":
		return "content_filter"
	}
	return "stop"
}

// parseUsage reads a Converse usage object. Bedrock counts cache reads and
// writes apart from inputTokens; OpenAI's prompt_tokens includes them. A
// count that is not one, or a prompt summing past 2^64-1, reports no usage.
func parseUsage(u gjson.Result) providers.Usage {
	if !u.IsObject() {
		return providers.Usage{}
	}
	out := providers.Usage{Reported: true}
	var input, write uint64
	var c providers.Counts
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "inputTokens":
			input = c.Read(v.Raw)
		case "outputTokens":
			out.Completion = c.Read(v.Raw)
		case "cacheReadInputTokens":
			out.Cached = c.Read(v.Raw)
		case "cacheWriteInputTokens":
			write = c.Read(v.Raw)
		}
		return c.OK()
	})
	prompt := c.Sum(c.Sum(input, out.Cached), write)
	if !c.OK() {
		return providers.Usage{} // a count that is not one (providers.Count): none reported
	}
	out.Prompt, out.CacheWrite = prompt, write
	return out
}

// appendUsage appends an OpenAI usage member, comma first.
func appendUsage(dst []byte, u providers.Usage) []byte {
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
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
