package mockllm

import (
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// This file holds how the mock uses the tools a request declares, the same
// in every wire format (issue #16: agent frameworks run their loop on it):
//
//   - tool_choice none: a text answer. A forced choice (OpenAI "required" or
//     a named function, Anthropic any or tool, Gemini mode ANY, Bedrock any
//     or tool): tool calls. auto, or no choice: tool calls when the last
//     message is the user's and names a declared tool (the name as a whole
//     word, any case: "use get_weather for Paris"), or when the tool_calls
//     option asks for them; else a text answer.
//   - Which tools: a named choice calls that tool; otherwise the tools the
//     last user message names, in declaration order, then the others; a
//     forced choice with none named calls the first declared tool.
//   - How many: the tool_calls option (X-Mock-Tool-Calls), else one per
//     tool the message names (at least one). Several calls need the request
//     to allow them (OpenAI parallel_tool_calls not false, Anthropic
//     disable_parallel_tool_use not true); otherwise there is one.
//   - Arguments follow each tool's parameter schema (schema.go). Strings
//     are the answer's words: as many as a text answer would have (the
//     words setting, or chunks when streamed); call j starts j words later.
//   - A tool result as the last message (OpenAI role "tool", Anthropic
//     tool_result blocks, Gemini functionResponse parts, Bedrock toolResult
//     blocks) with tools declared and no forced choice is answered with
//     text mentioning it: the answer's fourth word is replaced by
//     "(tool result: <the result text>)", so any answer of four words or
//     more quotes the result, and completion tokens stay one per word.
//
// Completion tokens of a tool-call answer are its words (non-stream) or
// its chunks (stream), as for text. Streamed, the arguments of each call
// are split over its share of the content chunks plus an opening and a
// closing fragment, at character boundaries, as the providers' deltas
// split them (Gemini sends each call whole, as its API does).

// maxToolCalls bounds the tool_calls option.
const maxToolCalls = 16

// toolMode is what a request's tool choice allows.
type toolMode uint8

const (
	modeAuto     toolMode = iota // the model decides (the rule above)
	modeNone                     // text only
	modeRequired                 // some tool must be called
	modeNamed                    // this tool must be called
)

// toolDecl is one declared tool: its name as a raw JSON string token and
// its parameter schema (the zero Result when it declares none).
type toolDecl struct {
	name   gjson.Result
	schema gjson.Result
}

// toolRequest is what a request says about tools, read by each format's
// parser. Its values point into the request body.
type toolRequest struct {
	decls    []toolDecl
	mode     toolMode
	named    gjson.Result // modeNamed: the name, a JSON string
	parallel bool         // several calls may come in one answer
	lastText string       // the text of the last message when it is the user's
	results  []string     // tool results the last message carries
}

// call is one tool call of an answer: the name (a raw JSON string token)
// and the arguments (a JSON object). Both are the answer's own copies.
type call struct {
	name, args string
}

// useTools decides the answer's tool calls, or the mention of a tool
// result, for a request with tools; words is the word count of a string
// argument.
func (a *answer) useTools(tr *toolRequest, calls, words int) {
	if tr == nil || len(tr.decls) == 0 && tr.mode != modeNamed {
		return
	}
	targets := tr.targets(calls)
	if len(targets) == 0 {
		if len(tr.results) > 0 && len(tr.decls) > 0 {
			a.mention = appendMention(nil, tr.results)
		}
		return
	}
	a.calls = make([]call, len(targets))
	var buf []byte
	for j, d := range targets {
		buf, _ = appendToolArgs(buf[:0], d.schema, words, j)
		a.calls[j] = call{name: d.name.Raw, args: string(buf)}
	}
}

// targets returns the tools to call, one per call; none for a text answer.
func (tr *toolRequest) targets(option int) []toolDecl {
	option = min(option, maxToolCalls)
	if tr.mode == modeNone || tr.mode == modeAuto && len(tr.results) > 0 {
		return nil
	}
	if tr.mode == modeNamed {
		d := toolDecl{name: tr.named}
		for _, t := range tr.decls {
			if t.name.Str == tr.named.Str {
				d = t
				break
			}
		}
		return repeatTools([]toolDecl{d}, max(option, 1), tr.parallel)
	}
	named := tr.mentioned()
	n := option
	if n == 0 {
		n = len(named)
	}
	if tr.mode == modeRequired {
		n = max(n, 1)
	}
	if n == 0 {
		return nil
	}
	order := named
	for _, d := range tr.decls {
		if !mentions(tr.lastText, d.name.Str) {
			order = append(order, d)
		}
	}
	return repeatTools(order, n, tr.parallel)
}

// repeatTools returns n calls cycling through order (one unless parallel).
func repeatTools(order []toolDecl, n int, parallel bool) []toolDecl {
	if !parallel {
		n = 1
	}
	out := make([]toolDecl, n)
	for i := range out {
		out[i] = order[i%len(order)]
	}
	return out
}

// mentioned returns the declared tools the last user message names.
func (tr *toolRequest) mentioned() []toolDecl {
	var out []toolDecl
	for _, d := range tr.decls {
		if mentions(tr.lastText, d.name.Str) {
			out = append(out, d)
		}
	}
	return out
}

// mentions reports whether text holds name as a whole word, in any case:
// not preceded or followed by a letter, digit or underscore.
func mentions(text, name string) bool {
	if name == "" || text == "" {
		return false
	}
	lower, n := strings.ToLower(text), strings.ToLower(name)
	for from := 0; ; {
		i := strings.Index(lower[from:], n)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(n)
		if (i == 0 || !wordByte(lower[i-1])) && (end == len(lower) || !wordByte(lower[end])) {
			return true
		}
		from = i + 1
	}
}

func wordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c >= 0x80
}

// maxMention bounds the quoted result text, in bytes.
const maxMention = 300

// appendMention appends "(tool result: A; B)", escaped for a JSON string,
// with whitespace runs as single spaces and at most maxMention bytes of
// results.
func appendMention(dst []byte, results []string) []byte {
	text := strings.Join(strings.Fields(strings.Join(results, "; ")), " ")
	if len(text) > maxMention {
		cut := maxMention
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "..."
	}
	dst = append(dst, "(tool result: "...)
	dst = appendEscaped(dst, text)
	return append(dst, ')')
}

// appendEscaped appends s as the body of a JSON string.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// mentionWord is the word the mention of a tool result replaces.
const mentionWord = 3

// appendText appends the n words of a text answer: generated words, with
// the mention of a tool result in place of word mentionWord.
func (a *answer) appendText(dst []byte, n int) []byte {
	for i := range n {
		dst = a.appendChunk(dst, i)
	}
	return dst
}

// appendChunk appends word i of a text answer, with a leading space after
// the first.
func (a *answer) appendChunk(dst []byte, i int) []byte {
	if i != mentionWord || len(a.mention) == 0 {
		return appendChunkWord(dst, i)
	}
	dst = append(dst, ' ')
	return append(dst, a.mention...)
}

// resultText returns the text of a tool result value: a string, the text
// of content parts or blocks ({"text":...}, or Bedrock's {"json":...}),
// else the JSON itself.
func resultText(v gjson.Result) string {
	switch {
	case v.Type == gjson.String:
		return v.Str
	case v.IsArray():
		var parts []string
		v.ForEach(func(_, p gjson.Result) bool {
			switch {
			case p.Type == gjson.String:
				parts = append(parts, p.Str)
			case p.Get("text").Type == gjson.String:
				parts = append(parts, p.Get("text").Str)
			case p.Get("json").Exists():
				parts = append(parts, p.Get("json").Raw)
			}
			return true
		})
		return strings.Join(parts, " ")
	case v.Exists():
		return v.Raw
	}
	return ""
}

// planItem is one piece of a streamed tool-call answer: the opening of a
// call, a fragment of its arguments (bytes lo..hi of its args), or its
// closing. Token fragments are the content chunks; the rest ride with the
// events around them.
type planItem struct {
	kind   itemKind
	token  bool
	call   int
	lo, hi int
}

type itemKind uint8

const (
	itemOpen itemKind = iota
	itemFragment
	itemClose
)

// planCalls lays out st's calls over its content chunks: call j gets its
// share of the chunks as argument fragments, between an opening fragment
// and a closing one (dropped when empty); closes adds a closing item per
// call. It sets st.lead and st.trail, the items before the first and after
// the last content chunk.
func planCalls(st *stream, closes bool) {
	st.items = st.items[:0]
	k := len(st.a.calls)
	for j, c := range st.a.calls {
		share := st.chunks / k
		if j < st.chunks%k {
			share++
		}
		st.items = append(st.items, planItem{kind: itemOpen, call: j})
		pieces := share + 2
		cut := func(p int) int {
			b := p * len(c.args) / pieces
			for b < len(c.args) && !utf8.RuneStart(c.args[b]) {
				b++
			}
			return b
		}
		for p := range pieces {
			lo, hi := cut(p), cut(p+1)
			token := p > 0 && p < pieces-1
			if token || hi > lo {
				st.items = append(st.items, planItem{kind: itemFragment, token: token, call: j, lo: lo, hi: hi})
			}
		}
		if closes {
			st.items = append(st.items, planItem{kind: itemClose, call: j})
		}
	}
	st.lead, st.trail, st.cursor = len(st.items), 0, 0
	for i, it := range st.items {
		if it.token {
			st.lead = min(st.lead, i)
			st.trail = len(st.items) - i - 1
		}
	}
}

// itemWriter writes the plan items of one wire format.
type itemWriter interface {
	appendItem(dst []byte, st *stream, it planItem, frag string) []byte
}

// appendItems appends the next plan items: one (head and tail), or up to
// and including the next content chunk (content).
func appendItems(dst []byte, st *stream, w itemWriter, content bool) []byte {
	for st.cursor < len(st.items) {
		it := st.items[st.cursor]
		st.cursor++
		c := st.a.calls[it.call]
		dst = w.appendItem(dst, st, it, c.args[it.lo:it.hi])
		if !content || it.token {
			break
		}
	}
	return dst
}
