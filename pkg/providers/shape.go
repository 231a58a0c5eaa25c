package providers

import (
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
)

// answerMember is the member each endpoint's success answer promises, an
// array: what the official SDKs read unconditionally.
var answerMember = [...]string{
	Chat:        "choices",
	Completions: "choices",
	Embeddings:  "data",
	Responses:   "output",
}

// CheckAnswer reports whether body, a valid JSON 200 answer relayed
// without translation, has the shape endpoint e promises: an object with
// its array member (choices for chat and completions, data for embeddings,
// output for the Responses API). An upstream answering 200 with JSON of
// another shape would otherwise reach the client as a success it cannot
// read; the error wraps ErrMalformed (answered 502 upstream_malformed).
func CheckAnswer(e Endpoint, body []byte) error {
	member := "choices"
	if int(e) < len(answerMember) {
		member = answerMember[e]
	}
	return CheckMember(body, member)
}

// CheckMember is CheckAnswer for an answer of another API (Anthropic's
// Messages API promises "content"): body must be an object with member as
// an array.
func CheckMember(body []byte, member string) error {
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))) // no copy of the answer
	if !root.IsObject() {
		return fmt.Errorf("%w: the answer is not a JSON object", ErrMalformed)
	}
	if !root.Get(member).IsArray() {
		return fmt.Errorf("%w: the answer has no %q array", ErrMalformed, member)
	}
	return nil
}
