package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// BodySpec describes a generated request body. The mock upstream reads the
// "mock" object it adds; a gateway forwards bodies unchanged, so the
// settings reach the mock through it.
type BodySpec struct {
	// Model is the request's model.
	Model string `json:"model"`
	// PromptWords is the number of words in the final user message (or the
	// embeddings input). Default 16.
	PromptWords int `json:"prompt_words"`
	// HistoryKB adds a conversation history of about this many KiB before
	// the final user message (chat only).
	HistoryKB int `json:"history_kb,omitempty"`
	// MixedText writes the history as agent and RAG traffic does: prose
	// with quotes, newlines and tabs, pasted code (whose <, > and & the
	// encoder writes as \u003c, \u003e and \u0026) and non-ASCII text
	// (accents, CJK, emoji), instead of plain ASCII words. HistoryKB then
	// counts the history as encoded, so it is about the body's size.
	MixedText bool `json:"mixed_text,omitempty"`
	// Stream asks for an SSE answer.
	Stream bool `json:"stream,omitempty"`
	// IncludeUsage asks for a final usage chunk (stream_options.include_usage).
	IncludeUsage bool `json:"include_usage,omitempty"`
	// Chunks is the number of content chunks the mock streams (mock.chunks).
	Chunks int `json:"chunks,omitempty"`
	// ChunkDelayMS is the mock's pause between chunks, in milliseconds.
	ChunkDelayMS int `json:"chunk_delay_ms,omitempty"`
	// LatencyMS is the mock's pause before the response header, in milliseconds.
	LatencyMS int `json:"latency_ms,omitempty"`
	// Embeddings builds an embeddings request instead of a chat request.
	Embeddings bool `json:"embeddings,omitempty"`
	// Dims is the embeddings "dimensions" field; 0 leaves it out.
	Dims int `json:"dims,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type mockSettings struct {
	Chunks       int `json:"chunks,omitempty"`
	ChunkDelayMS int `json:"chunk_delay_ms,omitempty"`
	LatencyMS    int `json:"latency_ms,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatBody struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	Mock          *mockSettings  `json:"mock,omitempty"`
}

type embeddingsBody struct {
	Model      string        `json:"model"`
	Input      string        `json:"input"`
	Dimensions int           `json:"dimensions,omitempty"`
	Mock       *mockSettings `json:"mock,omitempty"`
}

// BuildBody returns the JSON request body s describes. It runs once per
// run, so it uses encoding/json.
func BuildBody(s BodySpec) ([]byte, error) {
	if s.Model == "" {
		return nil, errors.New("build body: model is empty")
	}
	if s.PromptWords < 0 || s.HistoryKB < 0 || s.Chunks < 0 || s.ChunkDelayMS < 0 || s.LatencyMS < 0 || s.Dims < 0 {
		return nil, errors.New("build body: negative size or delay")
	}
	if s.Embeddings && s.Stream {
		return nil, errors.New("build body: embeddings cannot stream")
	}
	if s.IncludeUsage && !s.Stream {
		return nil, errors.New("build body: include_usage needs a stream")
	}
	words := s.PromptWords
	if words == 0 {
		words = 16
	}
	var mock *mockSettings
	if s.Chunks > 0 || s.ChunkDelayMS > 0 || s.LatencyMS > 0 {
		mock = &mockSettings{Chunks: s.Chunks, ChunkDelayMS: s.ChunkDelayMS, LatencyMS: s.LatencyMS}
	}
	var (
		b   []byte
		err error
	)
	if s.Embeddings {
		b, err = json.Marshal(embeddingsBody{Model: s.Model, Input: text(0, words), Dimensions: s.Dims, Mock: mock})
	} else {
		msgs := append(history(s.HistoryKB<<10, s.MixedText), chatMessage{Role: "user", Content: text(0, words)})
		cb := chatBody{Model: s.Model, Messages: msgs, Stream: s.Stream, Mock: mock}
		if s.IncludeUsage {
			cb.StreamOptions = &streamOptions{IncludeUsage: true}
		}
		b, err = json.Marshal(cb)
	}
	if err != nil {
		return nil, fmt.Errorf("build body: %w", err)
	}
	return b, nil
}

// history returns alternating user and assistant messages whose contents
// add up to about size bytes, in plain words or mixed text. Mixed text
// counts the messages as encoded (escapes and JSON syntax included), so a
// mixed history of 64 KiB makes a body of about 64 KiB.
func history(size int, mixed bool) []chatMessage {
	const perMessage = 40 // words; about 256 bytes of content
	var msgs []chatMessage
	for n, i := 0, 0; n < size; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c := text(i*perMessage, perMessage)
		m := chatMessage{Role: role, Content: c}
		n += len(c)
		if mixed {
			m.Content = mixedText(i)
			enc, _ := json.Marshal(m) // a struct of strings always encodes
			n += len(enc) + 1 - len(c)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// mixedPieces are the parts mixedText cycles through: about 1 KiB in all.
var mixedPieces = [...]string{
	"Here is the section you asked about:\n\n> \"Budgets are checked before the call, and billed after it.\"\n",
	"```go\nif n := len(body); n > 0 && body[0] != '{' {\n\treturn fmt.Errorf(\"bad body: %q\", body[:min(n, 16)])\n}\n```\n",
	"Le café coûte 3,50 € ; la réunion est à 14 h — merci d'être à l'heure.\n",
	"要点：网关在发送请求之前检查预算，并在之后计费。\n",
	"Release notes 🚀: latency ↓ 12 %, throughput ↑ 8 % (p99 < 2 ms & no errors).\n",
	"<div class=\"answer\">See C:\\tools\\bench & the table below.</div>\n\tcol1\tcol2\n",
	"Straße, naïve, façade, smörgåsbord, Ελληνικά, русский текст, 日本語のテキスト.\n",
}

// mixedText returns the content of history message i in mixed text: a few
// pieces, different per message, about 500 bytes.
func mixedText(i int) string {
	var sb strings.Builder
	for j := range 4 {
		sb.WriteString(mixedPieces[(i+j*3)%len(mixedPieces)])
	}
	sb.WriteString(text(i*7, 12))
	return sb.String()
}

// text returns n words of a fixed vocabulary, starting at word offset.
func text(offset, n int) string {
	vocab := [...]string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog",
		"while", "seven", "bright", "gateways", "route", "tokens", "to", "many", "models", "and",
		"count", "every", "cent", "spent", "by", "each", "team"}
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(vocab[(offset+i)%len(vocab)])
	}
	return sb.String()
}
