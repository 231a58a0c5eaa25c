package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
)

// Response translates a complete generateContent or batchEmbedContents
// answer into the OpenAI chat.completion or embeddings list body.
func (p *Provider) Response(dst, body []byte, c *providers.Call) ([]byte, providers.Usage, error) {
	if !providers.ValidJSON(body) {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: body is not JSON", p.name, providers.ErrMalformed)
	}
	root := gjson.Parse(bytesString(body))
	if !root.IsObject() {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: body is not an object", p.name, providers.ErrMalformed)
	}
	if c.Endpoint == providers.Embeddings {
		return p.embeddingsResponse(dst, root, c)
	}
	return p.chatResponse(dst, root, c)
}

// answer holds the top-level members of a GenerateContentResponse.
type answer struct {
	candidates, usage, responseID, modelVersion, feedback, err gjson.Result
}

func readAnswer(root gjson.Result) answer {
	var a answer
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "candidates":
			a.candidates = v
		case "usageMetadata":
			a.usage = v
		case "responseId":
			a.responseID = v
		case "modelVersion":
			a.modelVersion = v
		case "promptFeedback":
			a.feedback = v
		case "error":
			a.err = v
		}
		return true
	})
	return a
}

// blocked reports whether the prompt was refused before any candidate.
func (a *answer) blocked() bool {
	return a.feedback.Get("blockReason").Type == gjson.String
}

// appendID appends the answer's id after "chatcmpl-": Gemini's responseId
// (a raw JSON token, copied still escaped), or the clock in hex when there
// is none.
func (p *Provider) appendID(dst []byte, responseID string) []byte {
	if id := inner(responseID); id != "" {
		return append(dst, id...)
	}
	return appendHex(dst, uint64(p.now().UnixNano()))
}

// appendModel appends the model as a JSON string: the modelVersion Gemini
// reported (a raw JSON token), else the requested model.
func appendModel(dst []byte, modelVersion, model string) []byte {
	if inner(modelVersion) != "" {
		return append(dst, modelVersion...)
	}
	return rawjson.AppendString(dst, model)
}

// chatResponse writes a chat.completion object.
func (p *Provider) chatResponse(dst []byte, root gjson.Result, c *providers.Call) ([]byte, providers.Usage, error) {
	a := readAnswer(root)
	if !a.candidates.IsArray() && !a.blocked() {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: no candidates", p.name, providers.ErrMalformed)
	}
	u := parseUsage(a.usage.Raw)
	dst = append(dst, `{"id":"chatcmpl-`...)
	dst = p.appendID(dst, a.responseID.Raw)
	dst = append(dst, `","object":"chat.completion","created":`...)
	dst = strconv.AppendInt(dst, p.now().Unix(), 10)
	dst = append(dst, `,"model":`...)
	dst = appendModel(dst, a.modelVersion.Raw, c.Model)
	dst = append(dst, `,"choices":[`...)
	n := 0
	a.candidates.ForEach(func(_, cand gjson.Result) bool {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = appendChoice(dst, cand, n)
		n++
		return true
	})
	if n == 0 {
		finish := "stop"
		if a.blocked() {
			finish = "content_filter"
		}
		dst = append(dst, `{"index":0,"message":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":"`...)
		dst = append(dst, finish...)
		dst = append(dst, `"}`...)
	}
	dst = append(dst, ']')
	if u.Reported {
		dst = append(dst, ',')
		dst = appendUsage(dst, u)
	}
	return append(dst, '}'), u, nil
}

// appendChoice writes one candidate as an OpenAI choice.
func appendChoice(dst []byte, cand gjson.Result, pos int) []byte {
	index := int64(pos)
	if i := cand.Get("index"); i.Type == gjson.Number {
		index = i.Int()
	}
	parts := cand.Get("content.parts")
	texts, calls := 0, 0
	parts.ForEach(func(_, part gjson.Result) bool {
		if part.Get("thought").Type == gjson.True {
			return true
		}
		if part.Get("text").Type == gjson.String {
			texts++
		} else if part.Get("functionCall").IsObject() {
			calls++
		}
		return true
	})
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, index, 10)
	dst = append(dst, `,"message":{"role":"assistant","content":`...)
	switch {
	case texts > 0:
		dst = append(dst, '"')
		parts.ForEach(func(_, part gjson.Result) bool {
			if part.Get("thought").Type != gjson.True {
				dst = append(dst, rawInner(part.Get("text"))...)
			}
			return true
		})
		dst = append(dst, '"')
	case calls > 0:
		dst = append(dst, "null"...)
	default:
		dst = append(dst, `""`...)
	}
	dst = append(dst, `,"refusal":null`...)
	if calls > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		k := 0
		parts.ForEach(func(_, part gjson.Result) bool {
			fc := part.Get("functionCall")
			if !fc.IsObject() || part.Get("thought").Type == gjson.True {
				return true
			}
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendToolCall(dst, fc.Get("id").Raw, fc.Get("name").Raw, fc.Get("args").Raw, part.Get("thoughtSignature").Raw, k, false)
			k++
			return true
		})
		dst = append(dst, ']')
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, finishReason(cand.Get("finishReason").Str, calls > 0)...)
	return append(dst, `"}`...)
}

// appendToolCall writes a functionCall, given as raw JSON values of its
// id, name and args and of the part's thoughtSignature ("" when absent), as
// an OpenAI tool call. For a stream (delta true) it writes the head of a
// tool call delta: index, id, type, name and empty arguments, which follow
// in their own chunk.
func appendToolCall(dst []byte, id, name, args, sig string, k int, delta bool) []byte {
	if delta {
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(k), 10)
		dst = append(dst, `,"id":"`...)
	} else {
		dst = append(dst, `{"id":"`...)
	}
	if id := inner(id); id != "" {
		dst = append(dst, id...)
	} else {
		dst = append(dst, "call_"...)
		dst = strconv.AppendInt(dst, int64(k), 10)
	}
	dst = append(dst, `","type":"function","function":{"name":`...)
	if isString(name) {
		dst = append(dst, name...)
	} else {
		dst = append(dst, `""`...)
	}
	dst = append(dst, `,"arguments":"`...)
	if !delta {
		dst = appendArgs(dst, args)
	}
	dst = append(dst, `"}`...)
	if isString(sig) {
		dst = append(dst, `,"extra_content":{"google":{"thought_signature":`...)
		dst = append(dst, sig...)
		dst = append(dst, "}}"...)
	}
	return append(dst, '}')
}

// appendArgs writes raw args JSON escaped as the inside of a JSON string;
// absent args are {}.
func appendArgs(dst []byte, args string) []byte {
	if args == "" {
		return append(dst, "{}"...)
	}
	return rawjson.AppendStringBody(dst, args)
}

// finishReason maps a Gemini finishReason to OpenAI's.
func finishReason(reason string, calls bool) string {
	switch reason {
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
		"IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return "content_filter"
	}
	if calls {
		return "tool_calls"
	}
	return "stop"
}

// parseUsage reads a raw usageMetadata object (see the package
// documentation for how Gemini's counts map to OpenAI's). A count that is
// not one (providers.Count), or sums past 2^64-1, reports no usage.
func parseUsage(u string) providers.Usage {
	if len(u) == 0 || u[0] != '{' {
		return providers.Usage{}
	}
	out := providers.Usage{Reported: true}
	var candidates uint64
	var c providers.Counts
	forEachMember(u, func(k, v string) bool {
		switch k {
		case "promptTokenCount", "toolUsePromptTokenCount":
			out.Prompt = c.Sum(out.Prompt, c.Read(v))
		case "candidatesTokenCount":
			candidates = c.Read(v)
		case "cachedContentTokenCount":
			out.Cached = c.Read(v)
		case "thoughtsTokenCount":
			out.Reasoning = c.Read(v)
		}
		return c.OK()
	})
	out.Completion = c.Sum(candidates, out.Reasoning)
	if !c.OK() {
		return providers.Usage{}
	}
	return out
}

// appendUsage writes an OpenAI usage member.
func appendUsage(dst []byte, u providers.Usage) []byte {
	dst = append(dst, `"usage":{"prompt_tokens":`...)
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

// embeddingsResponse writes the OpenAI embeddings list for a
// batchEmbedContents answer, as floats or base64 as the client asked.
func (p *Provider) embeddingsResponse(dst []byte, root gjson.Result, c *providers.Call) ([]byte, providers.Usage, error) {
	embeddings := root.Get("embeddings")
	if !embeddings.IsArray() {
		return dst, providers.Usage{}, fmt.Errorf("provider %s: %w: no embeddings", p.name, providers.ErrMalformed)
	}
	b64 := gjson.GetBytes(c.Body, "encoding_format").Str == "base64"
	var err error
	var raw []byte
	dst = append(dst, `{"object":"list","data":[`...)
	i := 0
	embeddings.ForEach(func(_, e gjson.Result) bool {
		values := e.Get("values")
		if !values.IsArray() {
			err = fmt.Errorf("provider %s: %w: embedding %d has no values", p.name, providers.ErrMalformed, i)
			return false
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"embedding":`...)
		if b64 {
			if raw, err = float32Bytes(raw[:0], values); err != nil {
				err = fmt.Errorf("provider %s: %w: embedding %d: %w", p.name, providers.ErrMalformed, i, err)
				return false
			}
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, raw)
			dst = append(dst, '"')
		} else {
			dst = append(dst, values.Raw...)
		}
		dst = append(dst, '}')
		i++
		return true
	})
	if err != nil {
		return dst, providers.Usage{}, err
	}
	dst = append(dst, `],"model":`...)
	dst = rawjson.AppendString(dst, c.Model)
	u := providers.Usage{}
	if m := root.Get("usageMetadata"); m.IsObject() {
		if n, ok := providers.Count(m.Get("promptTokenCount").Raw); ok {
			u = providers.Usage{Prompt: n, Reported: true}
		}
	}
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = appendUint(dst, u.Prompt)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendUint(dst, u.Prompt)
	return append(dst, "}}"...), u, nil
}

// float32Bytes appends the little-endian float32 bytes of an array of
// numbers.
func float32Bytes(dst []byte, values gjson.Result) ([]byte, error) {
	var err error
	values.ForEach(func(_, v gjson.Result) bool {
		if v.Type != gjson.Number {
			err = fmt.Errorf("value %s is not a number", v.Raw)
			return false
		}
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(v.Num)))
		return true
	})
	return dst, err
}
