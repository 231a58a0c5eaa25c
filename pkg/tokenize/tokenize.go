// Package tokenize estimates token counts with the o200k_base BPE
// vocabulary (GPT-4o and later OpenAI models), for requests whose upstream
// reports no usage and for budget reservations made before a request is
// sent. Other model families tokenize differently, so counts for them are
// estimates.
//
// Tokenizing costs about 0.15 µs per byte of ordinary text and up to about
// 2.5 µs per byte of adversarial text (long runs without spaces), so each
// call counts at most a byte budget exactly and extrapolates the rest.
package tokenize

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tiktoken-go/tokenizer"
)

// Per-message overheads of the OpenAI chat format: each message is wrapped
// in special tokens and the reply is primed with a few more.
const (
	tokensPerMessage = 3
	tokensPerReply   = 3
	tokensPerName    = 1
)

// DefaultLimit is the number of text bytes New's Estimator counts exactly
// per call (64 KiB, about 16k tokens of English text).
const DefaultLimit = 64 << 10

// maxSpaceRun is the longest whitespace run, in bytes, handed to the
// tokenizer in one piece. Its split pattern takes time quadratic in the
// length of a run mixing newlines with other whitespace (100 KB of " \n"
// took 10 s), so longer runs are cut and counted in parts, which may count
// a token or so more per cut than an uncut run.
const maxSpaceRun = 64

// Estimator counts tokens. The vocabulary (embedded in the binary, several
// MB in memory) is loaded on first use. An Estimator is safe for concurrent
// use; the zero value is the same as New().
type Estimator struct {
	// limit is the exact-count budget per call in bytes: 0 means
	// DefaultLimit, negative means none.
	limit int
	once  sync.Once
	codec tokenizer.Codec // set by once; nil if loading failed
}

// New returns an Estimator that counts up to DefaultLimit bytes of text per
// call exactly and extrapolates beyond. The vocabulary is loaded by the
// first count.
func New() *Estimator { return &Estimator{} }

// NewLimited returns an Estimator that counts up to maxBytes bytes of text
// per call exactly and estimates the rest at the token density of the
// counted part (4 bytes per token if none was counted). maxBytes <= 0
// counts everything exactly, at a cost proportional to the input.
func NewLimited(maxBytes int) *Estimator {
	if maxBytes <= 0 {
		return &Estimator{limit: -1}
	}
	return &Estimator{limit: maxBytes}
}

// load returns the codec, loading it on first use.
func (e *Estimator) load() tokenizer.Codec {
	e.once.Do(func() {
		c, err := tokenizer.Get(tokenizer.O200kBase)
		if err == nil {
			e.codec = c
		}
	})
	return e.codec
}

// tally accumulates the text of one call within its byte budget.
type tally struct {
	codec   tokenizer.Codec // nil: estimate 4 bytes per token
	budget  int             // bytes still to count exactly; negative: no limit
	tokens  int             // tokens counted exactly
	counted int             // bytes counted exactly
	rest    int             // bytes beyond the budget, to extrapolate
}

// newTally starts the count of one call.
func (e *Estimator) newTally() *tally {
	budget := e.limit
	if budget == 0 {
		budget = DefaultLimit
	}
	return &tally{codec: e.load(), budget: budget}
}

// add counts s, exactly while the budget lasts.
func (t *tally) add(s string) {
	if t.budget >= 0 && len(s) > t.budget {
		cut := t.budget
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		t.rest += len(s) - cut
		s = s[:cut]
		t.budget = len(s)
	}
	if s == "" {
		return
	}
	t.tokens += exact(t.codec, s)
	t.counted += len(s)
	if t.budget >= 0 {
		t.budget -= len(s)
	}
}

// total returns the exact count plus the extrapolated rest, rounded up.
func (t *tally) total() int {
	if t.rest == 0 {
		return t.tokens
	}
	if t.tokens == 0 {
		return (t.rest + 3) / 4
	}
	extra := (int64(t.rest)*int64(t.tokens) + int64(t.counted) - 1) / int64(t.counted)
	return t.tokens + int(extra)
}

// exact counts s with c, cutting long whitespace runs; without a codec it
// estimates 4 bytes per token.
func exact(c tokenizer.Codec, s string) int {
	if c == nil {
		return (len(s) + 3) / 4
	}
	n, start, run := 0, 0, -1
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		switch {
		case !unicode.IsSpace(r):
			run = -1
		case run < 0:
			run = i
		case i-run >= maxSpaceRun:
			n += count(c, s[start:i])
			start, run = i, i
		}
		i += size
	}
	return n + count(c, s[start:])
}

// count counts s with c, or estimates 4 bytes per token if c fails.
func count(c tokenizer.Codec, s string) int {
	if s == "" {
		return 0
	}
	n, err := c.Count(s)
	if err != nil {
		return (len(s) + 3) / 4
	}
	return n
}

// Count returns the number of o200k_base tokens in text. Special-token text
// such as "<|endoftext|>" is counted as ordinary text and invalid UTF-8
// byte-wise. Whitespace runs longer than 64 bytes are counted in parts, so
// their count may be off by a token per cut, and text beyond the
// Estimator's limit is extrapolated; everything else counts exactly.
func (e *Estimator) Count(text []byte) int {
	t := e.newTally()
	t.add(string(text))
	return t.total()
}

// ChatPrompt estimates the prompt tokens of a chat request body: OpenAI
// /v1/chat/completions, or Anthropic /v1/messages. It counts, per message,
// the content text (a string, or the text of content parts) plus 3 tokens,
// 1 more for a name, plus tool calls' function names and arguments; then
// 3 tokens that prime the reply, the Anthropic top-level system prompt, and
// the JSON text of tool definitions (tools, functions). Images, audio and
// other non-text parts are not counted. A body that is not a JSON object
// counts 0; malformed JSON counts as far as it can be read. The work is
// linear in the body size whatever its nesting.
func (e *Estimator) ChatPrompt(body []byte) int {
	// No gjson.Valid: it recurses per nesting level and a deeply nested
	// body overflows the goroutine stack, which kills the process.
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return 0
	}
	t := e.newTally()
	n := 0
	msgs := root.Get("messages")
	msgs.ForEach(func(_, m gjson.Result) bool {
		n += message(t, m)
		return true
	})
	if msgs.IsArray() {
		n += tokensPerReply
	}
	content(t, root.Get("system"), false)
	for _, key := range []string{"tools", "functions"} {
		if v := root.Get(key); v.Exists() {
			t.add(v.Raw)
		}
	}
	return n + t.total()
}

// message adds one chat message's text to t and returns its overhead.
func message(t *tally, m gjson.Result) int {
	n := tokensPerMessage
	content(t, m.Get("content"), false)
	if name := m.Get("name"); name.Type == gjson.String {
		n += tokensPerName
		t.add(name.Str)
	}
	m.Get("tool_calls").ForEach(func(_, call gjson.Result) bool {
		t.add(call.Get("function.name").Str)
		t.add(call.Get("function.arguments").Str)
		return true
	})
	return n
}

// content adds message content to t: a string, or an array of parts whose
// text is counted ("text"), plus Anthropic tool_use inputs (as JSON text)
// and tool_result contents. nested is set inside a tool_result, whose own
// tool_result parts are not followed, so recursion stays bounded.
func content(t *tally, c gjson.Result, nested bool) {
	switch {
	case c.Type == gjson.String:
		t.add(c.Str)
	case c.IsArray():
		c.ForEach(func(_, part gjson.Result) bool {
			switch {
			case part.Type == gjson.String:
				t.add(part.Str)
			case part.IsObject():
				t.add(part.Get("text").Str)
				if in := part.Get("input"); in.IsObject() {
					t.add(in.Raw)
				}
				if !nested && part.Get("type").Str == "tool_result" {
					content(t, part.Get("content"), true)
				}
			}
			return true
		})
	}
}

// Prompt estimates the prompt tokens of a completions request (`prompt`),
// an embeddings request (`input`) or a Responses API request (`input`). The
// value may be a string, an array of strings, an array of token ids (each
// counts 1), an array of such arrays, or (Responses API) an array of
// message items counted like chat messages; a Responses API `instructions`
// string is added. A body that is not a JSON object counts 0; malformed
// JSON counts as far as it can be read.
func (e *Estimator) Prompt(body []byte) int {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return 0
	}
	t := e.newTally()
	v := root.Get("prompt")
	if !v.Exists() {
		v = root.Get("input")
	}
	n := promptValue(t, v, true)
	t.add(root.Get("instructions").Str)
	return n + t.total()
}

// promptValue adds one prompt value's text to t and returns the tokens
// counted outright (token ids, message overheads). Nested arrays are
// followed one level.
func promptValue(t *tally, v gjson.Result, top bool) int {
	n := 0
	switch {
	case v.Type == gjson.String:
		t.add(v.Str)
	case v.Type == gjson.Number:
		n++ // a token id
	case v.IsObject():
		n += message(t, v)
	case v.IsArray():
		v.ForEach(func(_, item gjson.Result) bool {
			switch {
			case top:
				n += promptValue(t, item, false)
			case item.Type == gjson.Number:
				n++
			case item.Type == gjson.String:
				t.add(item.Str)
			}
			return true
		})
	}
	return n
}
