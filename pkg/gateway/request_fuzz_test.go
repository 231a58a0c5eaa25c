package gateway

import (
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
)

// FuzzMessagesRequest runs arbitrary /v1/messages bodies through the checks
// and the translation serveMessages applies before a non-Anthropic
// provider: every body is refused with a 400 or becomes an OpenAI request
// the chat endpoint accepts, and nothing that is not UTF-8 gets through.
func FuzzMessagesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":16,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`,
		`{"model":"m","max_tokens":1,"stream":true,"tools":[{"name":"t","input_schema":{"type":"object"}}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"1","name":"t","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"r"}]}]}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		`{"model":"m","messages":[]}`, `{"model":1}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) == 0 || !providers.ValidJSON(body) {
			return
		}
		if aerr := checkUTF8(body); aerr != nil {
			if utf8.Valid(body) || aerr.Status != 400 {
				t.Fatalf("checkUTF8 refused %q with %d", body, aerr.Status)
			}
			return
		}
		if !utf8.Valid(body) {
			t.Fatalf("checkUTF8 passed %q", body)
		}
		oa, _, _, err := anthropic.RequestToOpenAI(nil, body)
		if err != nil {
			return // answered 400 invalid_request / unsupported_parameter
		}
		if !gjson.ValidBytes(oa) {
			t.Fatalf("translation is not JSON: %q -> %q", body, oa)
		}
		if aerr := parseRequest(oa, epChat, new(reqInfo)); aerr != nil && aerr.Status != 400 {
			t.Fatalf("status %d for translated %q", aerr.Status, oa)
		}
	})
}
