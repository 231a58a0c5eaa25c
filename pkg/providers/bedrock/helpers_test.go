package bedrock

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixedNow is the clock of every test provider: 2024-05-01T12:00:00Z.
var fixedNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func testProvider(t testing.TB, base string) *Provider {
	t.Helper()
	p, err := New(Options{
		Name: "bedrock-test", BaseURL: base, Region: "us-east-1",
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		Now: func() time.Time { return fixedNow },
	})
	if err != nil {
		t.Fatalf("new provider: %v", err)
	}
	return p
}

// chatCall returns the call the gateway would make for an OpenAI body.
func chatCall(body string) *providers.Call {
	c := &providers.Call{Endpoint: providers.Chat, Body: []byte(body), Model: "anthropic.claude-3-haiku-20240307-v1:0", RequestID: []byte("req_test")}
	c.Stream = gjson.Get(body, "stream").Bool()
	c.IncludeUsage = gjson.Get(body, "stream_options.include_usage").Bool()
	return c
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// indent pretty-prints JSON for a readable golden file; it fails the test
// on invalid JSON.
func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("invalid JSON %v: %s", err, b)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// frame encodes one event-stream message with string headers (name, value
// pairs) and a payload.
func frame(t testing.TB, payload string, headers ...string) []byte {
	t.Helper()
	var hs eventstream.Headers
	for i := 0; i+1 < len(headers); i += 2 {
		hs = append(hs, eventstream.Header{Name: headers[i], Value: eventstream.StringValue(headers[i+1])})
	}
	var buf bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&buf, eventstream.Message{Headers: hs, Payload: []byte(payload)}); err != nil {
		t.Fatalf("encode frame: %v", err)
	}
	return buf.Bytes()
}

// eventFrame encodes a Converse stream event.
func eventFrame(t testing.TB, typ, payload string) []byte {
	return frame(t, payload, ":event-type", typ, ":content-type", "application/json", ":message-type", "event")
}

// checkSSE checks that out is a sequence of "data: ...\n\n" events whose
// data is JSON or [DONE], and returns the data of each.
func checkSSE(t testing.TB, out []byte) []string {
	t.Helper()
	var data []string
	for _, ev := range strings.SplitAfter(string(out), "\n\n") {
		if ev == "" {
			continue
		}
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || !strings.HasSuffix(d, "\n\n") || strings.Count(d, "\n") != 2 {
			t.Fatalf("not one SSE data event: %q", ev)
		}
		d = strings.TrimSuffix(d, "\n\n")
		if d != "[DONE]" && !json.Valid([]byte(d)) {
			t.Fatalf("event data is not JSON: %q", d)
		}
		data = append(data, d)
	}
	return data
}

// slowReader returns at most n bytes per Read, to split frames across reads.
type slowReader struct {
	b []byte
	n int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.b))
	copy(p, r.b[:k])
	r.b = r.b[k:]
	return k, nil
}
