package mockllm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tollgate/tollgate/pkg/mockllm"
)

// bedrockBody is a Converse request; its documented prompt count is 2
// system words, 3 + 1 message words, 3 per message.
const bedrockBody = `{"system":[{"text":"Be terse."}],"messages":[{"role":"user","content":[{"text":"hello  there\nworld"},{"image":{"format":"png","source":{"bytes":"AAAA"}}}]},` +
	`{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"get_weather","input":{}}}]},` +
	`{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"sunny"}]}}]}]`

const bedrockPrompt = 2 + 3 + 1 + 3*3

const bedrockTools = `"toolConfig":{"tools":[{"toolSpec":{"name":"get_weather","inputSchema":{"json":{"type":"object"}}}},{"toolSpec":{"name":"get_time","inputSchema":{"json":{}}}}]`

const sigV4 = "AWS4-HMAC-SHA256 Credential=AKID/20240501/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"

func bedrockWith(extra string) string {
	if extra == "" {
		return bedrockBody + "}"
	}
	return bedrockBody + "," + extra + "}"
}

// bedrockPost posts a signed-looking request.
func (ts *testServer) bedrockPost(t *testing.T, path, body string, headers ...string) *http.Response {
	t.Helper()
	return ts.post(t, path, body, append([]string{"Authorization", sigV4}, headers...)...)
}

// converseAnswer is the Converse response the SDKs read.
type converseAnswer struct {
	Output struct {
		Message struct {
			Role    string `json:"role"`
			Content []struct {
				Text    *string `json:"text"`
				ToolUse *struct {
					ToolUseID string          `json:"toolUseId"`
					Name      string          `json:"name"`
					Input     json.RawMessage `json:"input"`
				} `json:"toolUse"`
			} `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string `json:"stopReason"`
	Usage      *struct {
		InputTokens  int `json:"inputTokens"`
		OutputTokens int `json:"outputTokens"`
		TotalTokens  int `json:"totalTokens"`
	} `json:"usage"`
	Metrics struct {
		LatencyMs int `json:"latencyMs"`
	} `json:"metrics"`
}

func TestBedrockConverse(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body string
		headers    []string
		text       string
		tool       string
		input      string
		stop       string
		usage      bool
	}{
		{name: "text", body: bedrockWith(""), headers: []string{"X-Mock-Words", "3"}, text: "Tollgate mock answer", stop: "end_turn", usage: true},
		{name: "mock object", body: bedrockWith(`"mock":{"words":2}`), text: "Tollgate mock", stop: "end_turn", usage: true},
		{name: "auto tool choice answers text", body: bedrockWith(bedrockTools + `,"toolChoice":{"auto":{}}}`), headers: []string{"X-Mock-Words", "1"}, text: "Tollgate", stop: "end_turn", usage: true},
		{name: "any tool", body: bedrockWith(bedrockTools + `,"toolChoice":{"any":{}}}`), headers: []string{"X-Mock-Words", "2"},
			tool: "get_weather", input: `{"input":"Tollgate mock"}`, stop: "tool_use", usage: true},
		{name: "named tool", body: bedrockWith(bedrockTools + `,"toolChoice":{"tool":{"name":"get_time"}}}`), headers: []string{"X-Mock-Words", "1"},
			tool: "get_time", input: `{"input":"Tollgate"}`, stop: "tool_use", usage: true},
		{name: "no usage", body: bedrockWith(""), headers: []string{"X-Mock-Words", "1", "X-Mock-No-Usage", "1"}, text: "Tollgate", stop: "end_turn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a converseAnswer
			resp := ts.postJSONSigned(t, "/model/anthropic.claude-3-haiku-20240307-v1:0/converse", tc.body, &a, tc.headers...)
			if resp.Header.Get("x-amzn-RequestId") == "" {
				t.Error("no x-amzn-RequestId")
			}
			m := a.Output.Message
			if m.Role != "assistant" || len(m.Content) != 1 || a.StopReason != tc.stop {
				t.Fatalf("answer %+v", a)
			}
			words := strings.Count(tc.text+strings.TrimSuffix(strings.TrimPrefix(tc.input, `{"input":"`), `"}`), " ") + 1
			if tc.tool == "" {
				if m.Content[0].Text == nil || *m.Content[0].Text != tc.text {
					t.Errorf("content %+v, want text %q", m.Content[0], tc.text)
				}
			} else {
				tu := m.Content[0].ToolUse
				if tu == nil || tu.Name != tc.tool || string(tu.Input) != tc.input || !strings.HasPrefix(tu.ToolUseID, "tooluse_") {
					t.Errorf("toolUse %+v, want %s %s", tu, tc.tool, tc.input)
				}
			}
			switch {
			case !tc.usage && a.Usage != nil:
				t.Errorf("usage %+v", a.Usage)
			case tc.usage && (a.Usage == nil || a.Usage.InputTokens != bedrockPrompt || a.Usage.OutputTokens != words || a.Usage.TotalTokens != bedrockPrompt+words):
				t.Errorf("usage %+v, want %d in, %d out", a.Usage, bedrockPrompt, words)
			}
		})
	}
}

// postJSONSigned is postJSON with a SigV4-looking Authorization header.
func (ts *testServer) postJSONSigned(t *testing.T, path, body string, v any, headers ...string) *http.Response {
	t.Helper()
	return ts.postJSON(t, path, body, v, append([]string{"Authorization", sigV4}, headers...)...)
}

func TestBedrockErrors(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
		headers          []string
		unsigned         bool
		status           int
		typ              string
	}{
		{name: "unsigned", path: "/model/m/converse", body: bedrockWith(""), unsigned: true, status: 403, typ: "MissingAuthenticationTokenException"},
		{name: "bearer", path: "/model/m/converse", body: bedrockWith(""), unsigned: true, headers: []string{"Authorization", "Bearer k"}, status: 403, typ: "MissingAuthenticationTokenException"},
		{name: "unknown action", path: "/model/m/invoke", body: bedrockWith(""), status: 404, typ: "UnknownOperationException"},
		{name: "no action", path: "/model/m", body: bedrockWith(""), status: 404, typ: "UnknownOperationException"},
		{name: "bad json", path: "/model/m/converse", body: `{"messages":`, status: 400, typ: "ValidationException"},
		{name: "no messages", path: "/model/m/converse", body: `{"messages":[]}`, status: 400, typ: "ValidationException"},
		{name: "injected 429", path: "/model/m/converse", body: bedrockWith(""), headers: []string{"X-Mock-Status", "429"}, status: 429, typ: "ThrottlingException"},
		{name: "injected 503 stream", path: "/model/m/converse-stream", body: bedrockWith(""), headers: []string{"X-Mock-Status", "503"}, status: 503, typ: "ServiceUnavailableException"},
		{name: "injected 500", path: "/model/m/converse", body: bedrockWith(`"mock":{"status":500}`), status: 500, typ: "InternalServerException"},
		{name: "injected 424", path: "/model/m/converse", body: bedrockWith(""), headers: []string{"X-Mock-Status", "424"}, status: 424, typ: "ModelErrorException"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var resp *http.Response
			if tc.unsigned {
				resp = ts.post(t, tc.path, tc.body, tc.headers...)
			} else {
				resp = ts.bedrockPost(t, tc.path, tc.body, tc.headers...)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if typ := resp.Header.Get("x-amzn-ErrorType"); !strings.HasPrefix(typ, tc.typ+":") {
				t.Errorf("x-amzn-ErrorType %q, want %s", typ, tc.typ)
			}
			var e struct {
				Message string `json:"message"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Message == "" {
				t.Errorf("error body: %v %+v", err, e)
			}
		})
	}
}

// bedrockFrame is one decoded event-stream message.
type bedrockFrame struct {
	typ     string // :event-type, or "!" + :exception-type
	payload map[string]any
	raw     []byte
}

// readFrames decodes frames until the body ends; err is what ended it
// (nil for a clean end).
func readFrames(t *testing.T, r io.Reader) ([]bedrockFrame, error) {
	t.Helper()
	dec := eventstream.NewDecoder()
	var frames []bedrockFrame
	for {
		m, err := dec.Decode(r, nil)
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		f := bedrockFrame{raw: m.Payload}
		switch mt := m.Headers.Get(":message-type"); {
		case mt != nil && mt.String() == "exception":
			f.typ = "!" + m.Headers.Get(":exception-type").String()
		case mt != nil && mt.String() == "event":
			f.typ = m.Headers.Get(":event-type").String()
			if ct := m.Headers.Get(":content-type"); ct == nil || ct.String() != "application/json" {
				t.Errorf("frame %s content type %v", f.typ, ct)
			}
		default:
			t.Fatalf("frame without :message-type: %v", m.Headers)
		}
		if err := json.Unmarshal(m.Payload, &f.payload); err != nil {
			t.Fatalf("frame %s payload %q: %v", f.typ, m.Payload, err)
		}
		frames = append(frames, f)
	}
}

func frameTypes(frames []bedrockFrame) string {
	var b strings.Builder
	for _, f := range frames {
		b.WriteString(f.typ + " ")
	}
	return strings.TrimSpace(b.String())
}

func TestBedrockStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	deltas := func(n int) string { return strings.TrimSpace(strings.Repeat("contentBlockDelta ", n)) }
	tests := []struct {
		name, body string
		headers    []string
		types      string // frame types in order
		text       string // concatenated deltas (text, or tool input)
		usage      bool
		endErr     bool // the body ends with a read or decode error
	}{
		{name: "text", body: bedrockWith(""), headers: []string{"X-Mock-Chunks", "3"},
			types: "messageStart " + deltas(3) + " contentBlockStop messageStop metadata", text: "Tollgate mock answer", usage: true},
		{name: "zero chunks", body: bedrockWith(`"mock":{"chunks":0}`),
			types: "messageStart contentBlockStop messageStop metadata", usage: true},
		{name: "tool", body: bedrockWith(bedrockTools + `,"toolChoice":{"any":{}}}`), headers: []string{"X-Mock-Chunks", "2"},
			types: "messageStart contentBlockStart " + deltas(4) + " contentBlockStop messageStop metadata", text: `{"input":"Tollgate mock"}`, usage: true},
		{name: "no usage", body: bedrockWith(""), headers: []string{"X-Mock-Chunks", "1", "X-Mock-No-Usage", "1"},
			types: "messageStart contentBlockDelta contentBlockStop messageStop metadata", text: "Tollgate"},
		{name: "error event", body: bedrockWith(""), headers: []string{"X-Mock-Chunks", "5", "X-Mock-Error-Event-After", "2"},
			types: "messageStart " + deltas(2) + " !modelStreamErrorException", text: "Tollgate mock"},
		{name: "garbage", body: bedrockWith(""), headers: []string{"X-Mock-Chunks", "5", "X-Mock-Garbage", "1", "X-Mock-Cut-After", "1"},
			types: "messageStart contentBlockDelta", text: "Tollgate", endErr: true},
		{name: "cut", body: bedrockWith(""), headers: []string{"X-Mock-Chunks", "5", "X-Mock-Cut-After", "2"},
			types: "messageStart " + deltas(2), text: "Tollgate mock", endErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := ts.bedrockPost(t, "/model/arn:aws:bedrock:us-east-1:1:inference-profile%2Fus.x/converse-stream", tc.body, tc.headers...)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
				t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			frames, err := readFrames(t, resp.Body)
			if (err != nil) != tc.endErr {
				t.Fatalf("end of body: %v", err)
			}
			if got := frameTypes(frames); got != tc.types {
				t.Fatalf("frames %q, want %q", got, tc.types)
			}
			var text strings.Builder
			for _, f := range frames {
				if f.typ == "contentBlockDelta" {
					d := f.payload["delta"].(map[string]any)
					if s, ok := d["text"].(string); ok {
						text.WriteString(s)
					} else {
						text.WriteString(d["toolUse"].(map[string]any)["input"].(string))
					}
				}
				if _, ok := f.payload["p"]; !ok && f.typ[0] != '!' {
					t.Errorf("frame %s has no padding", f.typ)
				}
			}
			if text.String() != tc.text {
				t.Errorf("text %q, want %q", text.String(), tc.text)
			}
			last := frames[len(frames)-1]
			if last.typ == "metadata" {
				_, has := last.payload["usage"]
				if has != tc.usage {
					t.Errorf("metadata %s", last.raw)
				}
				if tc.usage {
					words := strings.Count(text.String(), " ") + 1
					if tc.text == "" {
						words = 0
					}
					want := `"usage":{"inputTokens":` + strconv.Itoa(bedrockPrompt) + `,"outputTokens":` + strconv.Itoa(words) + `,"totalTokens":` + strconv.Itoa(bedrockPrompt+words) + `}`
					if !bytes.Contains(last.raw, []byte(want)) {
						t.Errorf("metadata %s, want %s", last.raw, want)
					}
				}
			}
		})
	}
}

// TestBedrockStreamGolden compares a streamed tool call, decoded frame by
// frame, with testdata/bedrock_stream.txt.
func TestBedrockStreamGolden(t *testing.T) {
	ts := start(t, mockllm.Config{})
	resp := ts.bedrockPost(t, "/model/m/converse-stream", bedrockWith(bedrockTools+`,"toolChoice":{"tool":{"name":"get_time"}}}`), "X-Mock-Chunks", "3")
	frames, err := readFrames(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, f := range frames {
		out.WriteString(f.typ + " " + string(f.raw) + "\n")
	}
	got := regexp.MustCompile(`tooluse_[0-9a-f]{16}`).ReplaceAll(out.Bytes(), []byte("tooluse_ID"))
	const path = "testdata/bedrock_stream.txt"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("stream differs from %s:\n%s", path, got)
	}
}

func TestBedrockStats(t *testing.T) {
	ts := start(t, mockllm.Config{})
	ts.srv.ResetStats()
	resp := ts.bedrockPost(t, "/model/m/converse-stream", bedrockWith(""), "X-Mock-Chunks", "4")
	if _, err := readFrames(t, resp.Body); err != nil {
		t.Fatal(err)
	}
	var a converseAnswer
	ts.postJSONSigned(t, "/model/m/converse", bedrockWith(""), &a, "X-Mock-Words", "2")
	st := waitStats(t, ts.srv, func(s mockllm.Stats) bool { return s.StreamsCompleted == 1 })
	if st.Chat != 2 || st.StreamsStarted != 1 || st.PromptTokens != 2*bedrockPrompt || st.CompletionTokens != 6 {
		t.Errorf("stats %+v", st)
	}
}
