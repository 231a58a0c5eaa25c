package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/tokenize"
)

// TestMessagesStreamStartUsage: a /v1/messages stream translated from an
// OpenAI-format upstream (which reports usage only at the end) carries the
// gateway's prompt estimate in message_start, the upstream's figures in
// message_delta, and the usage event bills the upstream's (issue #16).
func TestMessagesStreamStartUsage(t *testing.T) {
	a := newAcctRig(t, nil)
	const body = `{"model":"mock-gpt","max_tokens":64,"stream":true,"system":"Be terse.","messages":[{"role":"user","content":"hello there, how are you today?"}],"mock":{"chunks":3}}`
	oa, _, _, err := anthropic.RequestToOpenAI(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	estimate := int64(tokenize.New().ChatPrompt(oa))
	const reported = 2*3 + 2 + 6 // the mock's count: 3 per message, the words
	resp := a.post("/v1/messages", a.token(nil), body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
	}
	start, final := int64(-1), int64(-1)
	for _, ev := range readEvents(t, resp.Body) {
		d := gjson.Parse(ev.data)
		switch d.Get("type").Str {
		case "message_start":
			start = d.Get("message.usage.input_tokens").Int()
		case "message_delta":
			final = d.Get("usage.input_tokens").Int()
		}
	}
	ev := a.events(t, 1)[0]
	if estimate <= 0 || start != estimate || final != reported || ev.PromptTokens != reported || ev.Estimated {
		t.Errorf("message_start %d (estimate %d), message_delta %d, billed %d estimated %v; want the mock's %d at the end and billed",
			start, estimate, final, ev.PromptTokens, ev.Estimated, reported)
	}
}
