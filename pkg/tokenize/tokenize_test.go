package tokenize

import (
	"strings"
	"sync"
	"testing"

	"github.com/tiktoken-go/tokenizer"
)

// reference counts text with the library directly, as the oracle.
func reference(t testing.TB, text string) int {
	t.Helper()
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatalf("load o200k_base: %v", err)
	}
	ids, _, err := c.Encode(text)
	if err != nil {
		t.Fatalf("encode %q: %v", text, err)
	}
	return len(ids)
}

func TestCount(t *testing.T) {
	e := New()
	tests := []struct {
		name string
		text string
		want int // -1: compare with the library only
	}{
		{name: "empty", text: "", want: 0},
		{name: "hello world", text: "hello world", want: 2},
		{name: "sentence", text: "The quick brown fox jumps over the lazy dog.", want: 10},
		{name: "numbers split by three", text: "1234567", want: 3},
		{name: "special token text", text: "<|endoftext|>", want: -1},
		{name: "unicode", text: "Grüße aus Köln, 東京 und Zürich 🚀", want: -1},
		{name: "code", text: "func main() {\n\tfmt.Println(\"hi\")\n}\n", want: -1},
		{name: "invalid utf-8", text: "ok \xff\xfe ok", want: -1},
		{name: "long", text: strings.Repeat("lorem ipsum dolor sit amet ", 200), want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := e.Count([]byte(tt.text))
			if tt.want >= 0 && got != tt.want {
				t.Errorf("Count(%q) = %d, want %d", tt.text, got, tt.want)
			}
			if tt.text != "" {
				if ref := reference(t, tt.text); got != ref {
					t.Errorf("Count(%q) = %d, library says %d", tt.text, got, ref)
				}
			}
		})
	}
}

// TestCountLongWhitespace covers runs cut into parts: the count may drift
// from the library's by at most one token per cut.
func TestCountLongWhitespace(t *testing.T) {
	e := New()
	tests := []struct {
		name  string
		text  string
		exact bool
	}{
		{name: "spaces and newlines", text: "a" + strings.Repeat(" \n", 1500) + "b"},
		{name: "tabs and newlines", text: strings.Repeat("\t\n", 1000)},
		{name: "indentation", text: "x" + strings.Repeat(" ", 700) + "y"},
		{name: "no-break spaces", text: strings.Repeat("\u00a0\n", 600) + "z"},
		{name: "at the limit is not cut", text: "q" + strings.Repeat(" \n", maxSpaceRun/2) + "r", exact: true},
		{name: "many short runs are not cut", text: strings.Repeat("w"+strings.Repeat(" \n", 100), 20), exact: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ref := e.Count([]byte(tt.text)), reference(t, tt.text)
			if tt.exact && got != ref {
				t.Fatalf("Count = %d, library %d: uncut text must match", got, ref)
			}
			cuts := len(tt.text) / maxSpaceRun
			if diff := got - ref; diff < -cuts || diff > cuts {
				t.Errorf("Count = %d, library %d: off by more than %d cuts", got, ref, cuts)
			}
		})
	}
}

// FuzzCount checks Count against the library on text without long
// whitespace runs, and that the body estimators never panic or go negative.
func FuzzCount(f *testing.F) {
	for _, s := range []string{"hello world", "Grüße 東京 🚀", "a\xff b", " \n\t x", chatBody,
		`{"prompt":[1,[2,3],"x"]}`, `{"messages":[{"content":[{"type":"tool_result","content":"y"}]}]}`} {
		f.Add(s)
	}
	e := New()
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) < maxSpaceRun {
			if got, ref := e.Count([]byte(s)), reference(t, s); got != ref {
				t.Fatalf("Count(%q) = %d, library %d", s, got, ref)
			}
		}
		if n := e.ChatPrompt([]byte(s)); n < 0 {
			t.Fatalf("ChatPrompt(%q) = %d", s, n)
		}
		if n := e.Prompt([]byte(s)); n < 0 {
			t.Fatalf("Prompt(%q) = %d", s, n)
		}
	})
}

func TestLimit(t *testing.T) {
	c := func(s string) int { return reference(t, s) }
	lorem := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 2000) // 114 KB
	loremTokens := c(lorem)
	hw3 := `{"messages":[{"role":"user","content":"hello world"},{"role":"user","content":"hello world"},{"role":"user","content":"hello world"}]}`
	tests := []struct {
		name  string
		count func() int
		want  int
		slack int // allowed distance from want
	}{
		{name: "unlimited is exact beyond the default", count: func() int { return NewLimited(0).Count([]byte(lorem)) },
			want: loremTokens},
		{name: "default extrapolates within 0.1%", count: func() int { return New().Count([]byte(lorem)) },
			want: loremTokens, slack: loremTokens / 1000},
		{name: "cut backs up to a rune start", count: func() int { return NewLimited(5).Count([]byte("ééé")) },
			want: c("éé") + (2*c("éé")+3)/4},
		{name: "nothing counted: 4 bytes per token", count: func() int { return (&Estimator{limit: 1}).Count([]byte("é")) },
			want: 1},
		{name: "budget spans messages", count: func() int { return NewLimited(11).ChatPrompt([]byte(hw3)) },
			want: 3*2 + 3*3 + 3},
		{name: "budget spans prompt items", count: func() int {
			return NewLimited(11).Prompt([]byte(`{"input":["hello world","hello world hello world"]}`))
		},
			want: 2 + (23*2+10)/11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.count()
			if got < tt.want-tt.slack || got > tt.want+tt.slack {
				t.Errorf("count = %d, want %d±%d", got, tt.want, tt.slack)
			}
		})
	}
}

func TestZeroValue(t *testing.T) {
	var e Estimator
	if got := e.Count([]byte("hello world")); got != 2 {
		t.Errorf("zero Estimator Count = %d, want 2", got)
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	e := New()
	const n = 8
	got := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = e.Count([]byte("hello world")) })
	}
	wg.Wait()
	for i, g := range got {
		if g != 2 {
			t.Errorf("goroutine %d counted %d, want 2", i, g)
		}
	}
}

func TestChatPrompt(t *testing.T) {
	e := New()
	c := func(s string) int { return reference(t, s) }
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	tests := []struct {
		name string
		body string
		want int
	}{
		{name: "one string message",
			body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hello world"}]}`,
			want: 2 + 3 + 3},
		{name: "system and user",
			body: `{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hello world"}]}`,
			want: c("You are terse.") + 2 + 2*3 + 3},
		{name: "text parts, image ignored",
			body: `{"messages":[{"role":"user","content":[{"type":"text","text":"hello world"},{"type":"image_url","image_url":{"url":"https://x/y.png"}},{"type":"text","text":"What is this?"}]}]}`,
			want: 2 + c("What is this?") + 3 + 3},
		{name: "name adds one plus its tokens",
			body: `{"messages":[{"role":"user","name":"alice","content":"hello world"}]}`,
			want: 2 + 1 + c("alice") + 3 + 3},
		{name: "null content and tool calls",
			body: `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`,
			want: c("get_weather") + c(`{"city":"Paris"}`) + c("sunny") + 2*3 + 3},
		{name: "tools as JSON text",
			body: `{"messages":[{"role":"user","content":"hello world"}],"tools":` + tools + `}`,
			want: 2 + 3 + 3 + c(tools)},
		{name: "anthropic system and blocks",
			body: `{"model":"claude","system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"done"}]}]}]}`,
			want: c("Be brief.") + 2 + c(`{"a":1}`) + c("done") + 3*3 + 3},
		{name: "no messages", body: `{"model":"gpt-4o"}`, want: 0},
		{name: "empty messages", body: `{"messages":[]}`, want: 3},
		{name: "truncated JSON counts what it can read", body: `{"messages":[{"content":"hello"`, want: c("hello") + 3 + 3},
		{name: "not an object", body: `["hello world"]`, want: 0},
		{name: "empty body", body: ``, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.ChatPrompt([]byte(tt.body)); got != tt.want {
				t.Errorf("ChatPrompt = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPrompt(t *testing.T) {
	e := New()
	c := func(s string) int { return reference(t, s) }
	tests := []struct {
		name string
		body string
		want int
	}{
		{name: "completions string", body: `{"model":"m","prompt":"hello world"}`, want: 2},
		{name: "completions array", body: `{"prompt":["hello world","Say this is a test"]}`, want: 2 + c("Say this is a test")},
		{name: "token ids", body: `{"prompt":[15339,1917,0]}`, want: 3},
		{name: "arrays of token ids", body: `{"prompt":[[1,2],[3]]}`, want: 3},
		{name: "embeddings string", body: `{"model":"text-embedding-3-small","input":"hello world"}`, want: 2},
		{name: "embeddings array", body: `{"input":["hello world","hello world"]}`, want: 4},
		{name: "prompt wins over input", body: `{"prompt":"hello world","input":"ignored text here"}`, want: 2},
		{name: "responses items", body: `{"instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"hello world"}]}]}`,
			want: c("Be brief.") + 2 + 3},
		{name: "missing", body: `{"model":"m"}`, want: 0},
		{name: "wrong type", body: `{"input":true}`, want: 0},
		{name: "invalid JSON", body: `{"input":"hello`, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.Prompt([]byte(tt.body)); got != tt.want {
				t.Errorf("Prompt = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestDeepNesting feeds bodies nested a million levels deep. A recursive
// walk over such bodies (gjson.Valid is one) overflows the goroutine stack
// at a few million levels, a fatal error no recover catches, and is slow
// well before that.
func TestDeepNesting(t *testing.T) {
	const depth = 1 << 20
	open, closed := strings.Repeat("[", depth), strings.Repeat("]", depth)
	results := strings.Repeat(`{"type":"tool_result","content":[`, depth/32)
	tests := []struct {
		name   string
		count  func([]byte) int
		body   string
		want   int
		atMost bool // want is an upper bound
	}{
		{name: "chat unclosed messages", count: New().ChatPrompt,
			body: `{"messages":` + open, want: 3 + 3},
		{name: "chat nested tools", count: New().ChatPrompt,
			body: `{"messages":[{"role":"user","content":"hello world"}],"tools":` + open + closed + `}`,
			want: 2 + 3 + 3 + 2*depth, atMost: true},
		{name: "chat nested tool results", count: New().ChatPrompt,
			body: `{"messages":[{"role":"user","content":[` + results + `]}]}`, want: 3 + 3},
		{name: "prompt nested arrays", count: New().Prompt,
			body: `{"prompt":` + open + closed + `}`, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.count([]byte(tt.body))
			if got != tt.want && !(tt.atMost && got >= 0 && got <= tt.want) {
				t.Errorf("count = %d, want %d", got, tt.want)
			}
		})
	}
}

// chatBody is a typical chat request of about 1 KB.
const chatBody = `{"model":"gpt-4o","stream":true,"messages":[` +
	`{"role":"system","content":"You are a helpful assistant that answers questions about the company's internal tools concisely and accurately."},` +
	`{"role":"user","content":"How do I request access to the staging database? I need read-only access for the analytics project, and my manager already approved it last week."},` +
	`{"role":"assistant","content":"Open a ticket in the access portal, choose 'staging-db', select the read-only role and attach your manager's approval. Access is usually granted within a day."},` +
	`{"role":"user","content":[{"type":"text","text":"Thanks. Which VPN profile do I need to reach it from home, and does the access expire after some time?"}]}],` +
	`"tools":[{"type":"function","function":{"name":"search_docs","description":"Search the internal documentation","parameters":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}}]}`

func BenchmarkCount(b *testing.B) {
	tests := []struct {
		name string
		text string
	}{
		{name: "short", text: "hello world"},
		{name: "1KB", text: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 23)},
		{name: "64KB", text: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1456)},
		{name: "64KB whitespace", text: strings.Repeat(" \n", 32<<10)},
		{name: "1MB default limit", text: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 23302)},
		{name: "1MB adversarial", text: strings.Repeat("ab", 512<<10)},
	}
	e := New()
	for _, tt := range tests {
		text := []byte(tt.text)
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				e.Count(text)
			}
		})
	}
}

func BenchmarkChatPrompt(b *testing.B) {
	e := New()
	body := []byte(chatBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		e.ChatPrompt(body)
	}
}
