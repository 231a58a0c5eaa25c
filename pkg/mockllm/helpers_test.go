package mockllm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// testServer is a mock server on a loopback port with an HTTP client.
type testServer struct {
	srv    *mockllm.Server
	url    string
	addr   string
	client *http.Client
}

// start runs a mock server on 127.0.0.1 until the test ends.
func start(t testing.TB, cfg mockllm.Config) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := mockllm.New(cfg)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &testServer{
		srv:    srv,
		url:    "http://" + ln.Addr().String(),
		addr:   ln.Addr().String(),
		client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}
}

// post sends body to path with the given headers (name, value pairs).
func (ts *testServer) post(t testing.TB, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// postJSON posts and decodes a 200 JSON answer into v.
func (ts *testServer) postJSON(t testing.TB, path, body string, v any, headers ...string) *http.Response {
	t.Helper()
	resp := ts.post(t, path, body, headers...)
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return resp
}

// event is one SSE event as received.
type event struct {
	data string
	at   time.Time
}

// readEvents reads SSE events until the body ends. err is the read error
// that ended it, nil for a clean end. Lines that are not "data:" fields are
// returned as events with the raw line, so garbage is visible.
func readEvents(r io.Reader) (events []event, err error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				return events, nil
			}
			if line != "" {
				events = append(events, event{data: "RAW:" + line, at: time.Now()})
			}
			return events, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
		case strings.HasPrefix(line, "data: "):
			events = append(events, event{data: strings.TrimPrefix(line, "data: "), at: time.Now()})
		default:
			events = append(events, event{data: "RAW:" + line, at: time.Now()})
		}
	}
}

// chunk is the subset of chat.completion.chunk and text_completion chunk
// fields the SDKs read.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int    `json:"index"`
		Text  string `json:"text"`
		Delta struct {
			Role      *string    `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type toolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// decodeChunks decodes every event but the last ([DONE]).
func decodeChunks(t *testing.T, events []event) []chunk {
	t.Helper()
	var out []chunk
	for _, ev := range events {
		if ev.data == "[DONE]" {
			continue
		}
		var c chunk
		dec := json.NewDecoder(strings.NewReader(ev.data))
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("decode chunk %q: %v", ev.data, err)
		}
		out = append(out, c)
	}
	return out
}

// rawStream sends a streamed chat request on a raw TCP connection and
// returns the connection and a reader positioned after the header.
func rawStream(t *testing.T, addr, body string, headers ...string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	var req bytes.Buffer
	req.WriteString("POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n")
	for i := 0; i+1 < len(headers); i += 2 {
		req.WriteString(headers[i] + ": " + headers[i+1] + "\r\n")
	}
	req.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatalf("write request: %v", err)
	}
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("status line %q: %v", status, err)
	}
	for { // skip the header
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read header: %v", err)
		}
		if line == "\r\n" {
			return conn, br
		}
	}
}

// waitStats polls the server's counters until ok accepts them or 5 s pass.
func waitStats(t *testing.T, srv *mockllm.Server, ok func(mockllm.Stats) bool) mockllm.Stats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := srv.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never reached the expected state: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const chatBody = `{"model":"gpt-test","messages":[{"role":"system","content":"Be terse."},{"role":"user","content":[{"type":"text","text":"hello  there\nworld"},{"type":"image_url","image_url":{"url":"x y z"}}]}]`

// chatPromptTokens is the documented count for chatBody: 2 + 3 words
// plus 3 per message.
const chatPromptTokens = 2 + 3 + 2*3

// withFields returns chatBody with extra top-level members appended.
func withFields(extra string) string {
	if extra == "" {
		return chatBody + "}"
	}
	return chatBody + "," + extra + "}"
}
