package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBuildBody(t *testing.T) {
	type msg struct{ Role, Content string }
	type body struct {
		Model         string `json:"model"`
		Messages      []msg  `json:"messages"`
		Input         string `json:"input"`
		Dimensions    int    `json:"dimensions"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Mock *struct {
			Chunks       int `json:"chunks"`
			ChunkDelayMS int `json:"chunk_delay_ms"`
			LatencyMS    int `json:"latency_ms"`
		} `json:"mock"`
	}
	for _, tc := range []struct {
		name  string
		spec  BodySpec
		check func(t *testing.T, b body, raw []byte)
	}{
		{"chat default words", BodySpec{Model: "mock-gpt"}, func(t *testing.T, b body, raw []byte) {
			if len(b.Messages) != 1 || b.Messages[0].Role != "user" || len(strings.Fields(b.Messages[0].Content)) != 16 || b.Mock != nil || b.Stream {
				t.Fatalf("%s", raw)
			}
		}},
		{"stream with mock settings", BodySpec{Model: "m", PromptWords: 3, Stream: true, IncludeUsage: true, Chunks: 50, ChunkDelayMS: 20, LatencyMS: 5}, func(t *testing.T, b body, raw []byte) {
			if !b.Stream || b.StreamOptions == nil || !b.StreamOptions.IncludeUsage || b.Mock == nil ||
				b.Mock.Chunks != 50 || b.Mock.ChunkDelayMS != 20 || b.Mock.LatencyMS != 5 || len(strings.Fields(b.Messages[0].Content)) != 3 {
				t.Fatalf("%s", raw)
			}
		}},
		{"history", BodySpec{Model: "m", HistoryKB: 64}, func(t *testing.T, b body, raw []byte) {
			size := 0
			for i, m := range b.Messages[:len(b.Messages)-1] {
				want := map[bool]string{true: "user", false: "assistant"}[i%2 == 0]
				if m.Role != want {
					t.Fatalf("message %d role %q, want %q", i, m.Role, want)
				}
				size += len(m.Content)
			}
			if size < 64<<10 || size > 65<<10 || len(raw) > 80<<10 {
				t.Fatalf("history of %d bytes (body %d), want about 64 KiB", size, len(raw))
			}
		}},
		{"mixed history", BodySpec{Model: "m", HistoryKB: 64, MixedText: true}, func(t *testing.T, b body, raw []byte) {
			size := 0
			for _, m := range b.Messages[:len(b.Messages)-1] {
				size += len(m.Content)
			}
			if len(raw) < 64<<10 || len(raw) > 65<<10 {
				t.Fatalf("body of %d bytes (history %d), want about 64 KiB", len(raw), size)
			}
			for _, want := range []string{`\n`, `\t`, `\"`, `\\`, `\u003c`, `\u0026`, "é", "网关", "🚀"} {
				if !strings.Contains(string(raw), want) {
					t.Errorf("body lacks %s", want)
				}
			}
		}},
		{"embeddings", BodySpec{Model: "mock-embed", Embeddings: true, Dims: 256, PromptWords: 5}, func(t *testing.T, b body, raw []byte) {
			if b.Input == "" || len(strings.Fields(b.Input)) != 5 || b.Dimensions != 256 || b.Messages != nil {
				t.Fatalf("%s", raw)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := BuildBody(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			var b body
			if err := json.Unmarshal(raw, &b); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
			if b.Model != tc.spec.Model {
				t.Fatalf("model %q", b.Model)
			}
			tc.check(t, b, raw)
		})
	}
}

func TestBuildBodyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec BodySpec
	}{
		{"no model", BodySpec{}},
		{"negative words", BodySpec{Model: "m", PromptWords: -1}},
		{"streamed embeddings", BodySpec{Model: "m", Embeddings: true, Stream: true}},
		{"usage without stream", BodySpec{Model: "m", IncludeUsage: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := BuildBody(tc.spec); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}
