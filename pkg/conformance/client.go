package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// observation is what the client saw of one case's request.
type observation struct {
	requestID string // the gateway's x-request-id, else the client's
	clientID  string // the x-request-id sent
	body      []byte // the request body sent
	err       error  // the request could not be sent or its answer not read
	status    int
	header    http.Header
	raw       []byte     // a non-stream answer's body
	stream    bool       // the answer was an event stream
	events    []sseEvent // its data events (and non-SSE lines), in order
	readErr   error      // what ended the stream body; nil for a clean end
}

// sseEvent is one line of a streamed answer: a data field, or a line that
// is not SSE at all (raw).
type sseEvent struct {
	data string
	raw  bool
	at   time.Time
}

// maxAnswer bounds what the kit reads of one answer.
const maxAnswer = 4 << 20

// requestBody is the JSON body of a case's request.
type requestBody struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	Messages []message       `json:"messages"`
	Mock     json.RawMessage `json:"mock"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// send makes the case's request to the gateway gw and reads the answer.
func send(ctx context.Context, hc *http.Client, gw, token string, c *Case, id string) *observation {
	o := &observation{requestID: id, clientID: id}
	o.body, o.err = json.Marshal(requestBody{Model: c.Model, Stream: c.Stream,
		Messages: []message{{Role: "user", Content: c.prompt()}}, Mock: json.RawMessage(c.Mock)})
	if o.err != nil {
		return o
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/chat/completions", bytes.NewReader(o.body))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Request-Id", id)
	resp, err := hc.Do(req)
	if err != nil {
		o.err = fmt.Errorf("post %s: %w", req.URL, err)
		return o
	}
	defer resp.Body.Close()
	o.status, o.header = resp.StatusCode, resp.Header
	if gid := resp.Header.Get("X-Request-Id"); gid != "" {
		o.requestID = gid // the gateway's own id keys the usage event
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		o.stream = true
		o.events, o.readErr = readEvents(io.LimitReader(resp.Body, maxAnswer))
		return o
	}
	if o.raw, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer)); err != nil {
		o.err = fmt.Errorf("read the answer: %w", err)
	}
	return o
}

// readEvents reads a stream's data fields and any line that is not SSE,
// with their arrival times, until the body ends. It returns the error that
// ended the body (nil for a clean end).
func readEvents(r io.Reader) ([]sseEvent, error) {
	var out []sseEvent
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			now := time.Now()
			text := strings.TrimRight(line, "\r\n")
			switch {
			case text == "", strings.HasPrefix(text, ":"), strings.HasPrefix(text, "event:"),
				strings.HasPrefix(text, "id:"), strings.HasPrefix(text, "retry:"):
			case strings.HasPrefix(text, "data:"):
				out = append(out, sseEvent{data: strings.TrimPrefix(strings.TrimPrefix(text, "data:"), " "), at: now})
			default:
				out = append(out, sseEvent{data: text, raw: true, at: now})
			}
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// chunkEvent is the part of a chat.completion.chunk the kit reads.
type chunkEvent struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// completion is the part of a chat.completion the kit reads.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// delivered returns the answer text the client got: a non-stream answer's
// message, or the content of every stream chunk.
func (o *observation) delivered() string {
	if !o.stream {
		var c completion
		if json.Unmarshal(o.raw, &c) != nil || len(c.Choices) == 0 {
			return ""
		}
		return c.Choices[0].Message.Content
	}
	var b strings.Builder
	for _, ev := range o.events {
		var c chunkEvent
		if ev.raw || json.Unmarshal([]byte(ev.data), &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}
