package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll drains r event by event and returns the events and what was left.
func readAll(t testing.TB, r *Reader) (events []string, rest string, err error) {
	for {
		for {
			ev, ok := r.Next()
			if !ok {
				break
			}
			events = append(events, string(ev))
		}
		if err = r.Fill(); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return events, string(r.Buffered()), err
		}
	}
}

func TestReaderSplitsEvents(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		events []string
		rest   string
	}{
		{"lf", "data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}, ""},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"data: a\r\n\r\n", "data: b\r\n\r\n"}, ""},
		{"multi-line event", "event: x\ndata: 1\ndata: 2\n\n", []string{"event: x\ndata: 1\ndata: 2\n\n"}, ""},
		{"unterminated tail", "data: a\n\ndata: b\n", []string{"data: a\n\n"}, "data: b\n"},
		{"comment event", ": ping\n\ndata: [DONE]\n\n", []string{": ping\n\n", "data: [DONE]\n\n"}, ""},
		{"empty", "", nil, ""},
		{"leading blank line", "\n\ndata: a\n\n", []string{"\n\n", "data: a\n\n"}, ""},
	}
	for _, tc := range tests {
		for _, size := range []int{1, 3, 16, 4096} {
			t.Run(tc.name, func(t *testing.T) {
				// OneByteReader also splits every terminator across reads.
				r := NewReader(iotest.OneByteReader(strings.NewReader(tc.in)), size, 1<<20)
				events, rest, err := readAll(t, r)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Join(events, "|") != strings.Join(tc.events, "|") {
					t.Errorf("events = %q, want %q", events, tc.events)
				}
				if rest != tc.rest {
					t.Errorf("rest = %q, want %q", rest, tc.rest)
				}
			})
		}
	}
}

func TestReaderEventTooLarge(t *testing.T) {
	r := NewReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 8, 64)
	_, _, err := readAll(t, r)
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}

func TestReaderGrowsForLargeEvent(t *testing.T) {
	big := "data: " + strings.Repeat("y", 5000) + "\n\n"
	r := NewReader(strings.NewReader(big+"data: z\n\n"), 16, 1<<20)
	events, _, err := readAll(t, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0] != big {
		t.Fatalf("got %d events, first %d bytes", len(events), len(events[0]))
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, typ, data string
	}{
		{"single data", "data: {\"a\":1}\n\n", "", `{"a":1}`},
		{"no space", "data:{}\n\n", "", "{}"},
		{"two spaces keep one", "data:  x\n\n", "", " x"},
		{"typed", "event: message_start\ndata: {}\n\n", "message_start", "{}"},
		{"multi data", "data: a\ndata: b\ndata: c\n\n", "", "a\nb\nc"},
		{"crlf", "event: e\r\ndata: d\r\n\r\n", "e", "d"},
		{"comment only", ": keep-alive\n\n", "", ""},
		{"field without colon", "data\n\n", "", ""},
		{"id and retry ignored", "id: 7\nretry: 10\ndata: v\n\n", "", "v"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, data, _ := Parse([]byte(tc.in), nil)
			if string(typ) != tc.typ || string(data) != tc.data {
				t.Errorf("Parse = (%q, %q), want (%q, %q)", typ, data, tc.typ, tc.data)
			}
		})
	}
}

// FuzzReader checks that splitting never loses or invents bytes: the events
// plus the unterminated rest are exactly the input, every event ends in a
// blank line, and no event but the last contains one.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"data: a\n\n", "data: a\r\n\r\ndata: b\n", "\n\n\n", ": c\n\nevent: x\ndata: y\n\n", "\r\n\r"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, size uint8) {
		r := NewReader(iotest.HalfReader(bytes.NewReader(in)), int(size%64)+1, 1<<20)
		events, rest, err := readAll(t, r)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(events, "") + rest; got != string(in) {
			t.Fatalf("events+rest = %q, want %q", got, in)
		}
		for _, ev := range events {
			if n := terminator([]byte(ev)); n != len(ev) {
				t.Fatalf("event %q: first terminator at %d, len %d", ev, n, len(ev))
			}
		}
		if terminator([]byte(rest)) >= 0 {
			t.Fatalf("rest %q still holds a complete event", rest)
		}
		for _, ev := range events {
			Parse([]byte(ev), nil)
		}
	})
}

func BenchmarkReaderNextParse(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764460800,"model":"mock-gpt","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	stream := bytes.Repeat(chunk, 64)
	src := bytes.NewReader(stream)
	r := NewReader(src, 32<<10, 1<<20)
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; {
		ev, ok := r.Next()
		if !ok {
			if err := r.Fill(); err != nil {
				src.Reset(stream)
				r.Reset(src)
			}
			continue
		}
		if _, data, _ := Parse(ev, nil); len(data) == 0 {
			b.Fatal("no data")
		}
		i++
	}
}
