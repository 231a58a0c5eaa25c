package respcache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
)

const benchBody = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"user":"u-123",` +
	`"messages":[{"role":"system","content":"You are a helpful assistant."},` +
	`{"role":"user","content":"Summarize the plot of Hamlet in three sentences, please."}],` +
	`"temperature":0.2,"max_tokens":256}`

// BenchmarkNewKey: a small chat request, checked and keyed. Runs only for
// cached models; expected allocs/op: 0 (the writer is pooled).
func BenchmarkNewKey(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := NewKey("/chat/completions", body, Scope{Dept: "eng", Team: "search"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeyOf is the gateway's key of a scanned body: chat histories of
// mixed text (loadgen -history-mixed) of about 1 and 64 KiB, next to the
// gjson walk it replaced (gjsonKey, which computes the same keys).
// Expected allocs/op: 0 for KeyOf.
func BenchmarkKeyOf(b *testing.B) {
	for _, kb := range []int{1, 64} {
		body, err := loadgen.BuildBody(loadgen.BodySpec{Model: "m", HistoryKB: kb, MixedText: true, PromptWords: 16})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range []struct {
			name string
			key  func(string, []byte, Answer, Scope) Key
		}{{"rawjson", KeyOf}, {"gjson", gjsonKey}} {
			b.Run(fmt.Sprintf("%s-%dKB", f.name, kb), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					f.key("/chat/completions", body, StreamWithUsage, Scope{Dept: "eng", Team: "search"})
				}
			})
		}
	}
}

// BenchmarkEncodeDecode: a 40-event stream entry. Expected allocs/op: 4
// (encode buffer, entry, model and provider strings).
func BenchmarkEncodeDecode(b *testing.B) {
	e := &Entry{Model: "gpt-4o-mini", Provider: "openai", Usage: Usage{Prompt: 30, Completion: 60}}
	for i := 0; i < 40; i++ {
		e.AppendEvent([]byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word "}}]}` + "\n\n"))
	}
	b.ReportAllocs()
	for b.Loop() {
		v := appendEntry(make([]byte, 0, e.Size()), e)
		if _, err := decodeEntry(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPut: the request path's cost of storing an answer (encode and
// queue). Expected allocs/op: 3 (the encoded entry, the key in hex).
func BenchmarkPut(b *testing.B) {
	c := &Cache{now: time.Now, maxEntry: 1 << 20, queue: make(chan job, 1)}
	k, _ := NewKey("/chat/completions", []byte(benchBody), Scope{})
	e := &Entry{Body: make([]byte, 2048), Model: "gpt-4o-mini", Provider: "openai"}
	b.ReportAllocs()
	for b.Loop() {
		c.Put(k, time.Minute, e)
		<-c.queue
	}
}

// BenchmarkGetHit: one NATS KV read of a 2 KiB answer from an embedded
// server (loopback).
func BenchmarkGetHit(b *testing.B) {
	c, _, _ := openCacheB(b)
	k, _ := NewKey("/chat/completions", []byte(benchBody), Scope{})
	c.Put(k, time.Hour, &Entry{Body: make([]byte, 2048)})
	for c.Stats().Stored == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Get(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
}
