package openai

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestResponsesEncoderGolden encodes recorded chat streams (the ones the
// Messages encoder is checked with) into Responses event sequences and
// compares them with the golden transcripts; each must be well formed:
// consecutive sequence numbers, deltas adding up to the done texts and
// arguments, the terminal event's output equal to the items done, and the
// usage the chat stream reported.
func TestResponsesEncoderGolden(t *testing.T) {
	tests := []struct {
		name, status, text string
		calls              int
		usage              string
		seq                string
	}{
		{"text", "completed", "Hello, \"world\"\né", 0,
			`{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":46}`,
			"response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta " +
				"response.output_text.done response.content_part.done response.output_item.done response.completed"},
		{"tool_calls", "completed", "Checking.", 2,
			`{"input_tokens":100,"input_tokens_details":{"cached_tokens":0},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":120}`,
			"response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
				"response.output_text.done response.content_part.done response.output_item.done " +
				"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
				"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed"},
		{"length_no_usage", "incomplete", "cut short", 0, "null",
			"response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta " +
				"response.output_text.done response.content_part.done response.output_item.done response.incomplete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", "responses_encoder", tt.name+".sse"))
			if err != nil {
				t.Fatal(err)
			}
			e := NewResponsesEncoder("claude-x", "req_42", 1700000000)
			defer e.Release()
			out, err := e.Events(nil, in)
			if err != nil {
				t.Fatal(err)
			}
			if !e.Closed() {
				t.Error("encoder not closed after [DONE]")
			}
			golden(t, filepath.Join("testdata", "responses_encoder", tt.name+".golden.sse"), out)
			names, final := checkResponsesStream(t, out)
			if got := strings.Join(names, " "); got != tt.seq {
				t.Errorf("sequence\n got: %s\nwant: %s", got, tt.seq)
			}
			var calls int
			final.Get("output").ForEach(func(_, it gjson.Result) bool {
				if it.Get("type").Str == "function_call" {
					calls++
					if !json.Valid([]byte(it.Get("arguments").Str)) || it.Get("call_id").Str == "" {
						t.Errorf("call %s", it.Raw)
					}
				}
				return true
			})
			if final.Get("status").Str != tt.status || final.Get("output.0.content.0.text").Str != tt.text || calls != tt.calls ||
				final.Get("usage").Raw != tt.usage || final.Get("id").Str != "resp_42" {
				t.Errorf("final response %s", final.Raw)
			}
		})
	}
}

// TestResponsesEncoderFailure: a chat error event after the start becomes
// an error event numbered after the others, and nothing follows it.
func TestResponsesEncoderFailure(t *testing.T) {
	e := NewResponsesEncoder("m", "req_1", 1)
	defer e.Release()
	out, err := e.Events(nil, []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"+
		"data: {\"error\":{\"message\":\"overloaded\"}}\n\n"+"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more\"}}]}\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	evs := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
	last := evs[len(evs)-1]
	if !strings.HasPrefix(last, "event: error\n") || gjson.Get(strings.SplitN(last, "data: ", 2)[1], "sequence_number").Int() != int64(len(evs)-1) ||
		!strings.Contains(last, "overloaded") || !e.Closed() {
		t.Errorf("events %q", evs)
	}
	if _, err := e.Events(nil, []byte("data: {\"choices\"")); err == nil {
		t.Error("an incomplete event is not an error")
	}
}

// checkResponsesStream checks an encoded stream and returns its event
// names and the terminal event's response.
func checkResponsesStream(t *testing.T, out []byte) ([]string, gjson.Result) {
	t.Helper()
	var names, done []string
	var acc strings.Builder
	var final gjson.Result
	for i, ev := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		name = strings.TrimPrefix(name, "event: ")
		d := gjson.Parse(data)
		if !ok || !json.Valid([]byte(data)) || d.Get("type").Str != name || d.Get("sequence_number").Int() != int64(i) {
			t.Fatalf("event %d: %q", i, ev)
		}
		names = append(names, name)
		switch name {
		case "response.output_item.added":
			acc.Reset()
		case "response.output_text.delta", "response.function_call_arguments.delta":
			acc.WriteString(d.Get("delta").Str)
		case "response.output_text.done":
			if d.Get("text").Str != acc.String() {
				t.Errorf("text done %q, deltas %q", d.Get("text").Str, acc.String())
			}
		case "response.function_call_arguments.done":
			if d.Get("arguments").Str != acc.String() && !(acc.Len() == 0 && d.Get("arguments").Str == "{}") {
				t.Errorf("arguments done %q, deltas %q", d.Get("arguments").Str, acc.String())
			}
		case "response.output_item.done":
			done = append(done, d.Get("item").Raw)
		case "response.completed", "response.incomplete":
			final = d.Get("response")
		}
	}
	var items []string
	final.Get("output").ForEach(func(_, it gjson.Result) bool {
		items = append(items, it.Raw)
		return true
	})
	if strings.Join(items, ",") != strings.Join(done, ",") {
		t.Errorf("output %s, items done %v", final.Get("output").Raw, done)
	}
	return names, final
}

// golden checks got against the golden file byte for byte; -update
// rewrites it.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got: %s\nwant: %s", path, got, want)
	}
}

// BenchmarkResponsesEncoderChunk measures the translation of one chat
// content chunk into a response.output_text.delta event. Expected: 0
// allocs/op (the answer's text is kept for the done events, in a buffer
// that grows by doubling).
func BenchmarkResponsesEncoderChunk(b *testing.B) {
	e := NewResponsesEncoder("claude-sonnet-4-5", "req_1", 1)
	defer e.Release()
	ev := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello, \\\"world\\\"! Here is a typical chunk\\nof text.\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	out, _ := e.Event(nil, ev)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%4096 == 0 {
			e.text = e.text[:0] // bound the kept text; the cost per chunk is the same
		}
		var err error
		if out, err = e.Event(out[:0], ev); err != nil || len(out) == 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkResponsesEncoderStream measures a whole translated answer: 20
// content chunks, the finish and usage chunks and [DONE], with the
// encoder from its pool. Expected: 0 allocs/op.
func BenchmarkResponsesEncoderStream(b *testing.B) {
	var in []byte
	in = append(in, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"...)
	for range 20 {
		in = append(in, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word \"},\"finish_reason\":null}]}\n\n"...)
	}
	in = append(in, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"...)
	in = append(in, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n"...)
	var out []byte
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		e := NewResponsesEncoder("claude-sonnet-4-5", "req_1", 1)
		var err error
		if out, err = e.Events(out[:0], in); err != nil || !e.Closed() {
			b.Fatal(err)
		}
		e.Release()
	}
}
