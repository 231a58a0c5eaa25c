package providers

import (
	"errors"
	"fmt"

	"github.com/tollgate/tollgate/pkg/rawjson"
)

// answerMember is the member each endpoint's success answer promises, an
// array: what the official SDKs read unconditionally.
var answerMember = [...]string{
	Chat:        "choices",
	Completions: "choices",
	Embeddings:  "data",
	Responses:   "output",
}

// AnswerMember is the array member a success answer of endpoint e promises.
func AnswerMember(e Endpoint) string {
	if int(e) < len(answerMember) {
		return answerMember[e]
	}
	return "choices"
}

// CheckAnswer reports whether body, a 200 answer relayed without
// translation, is valid JSON with the shape endpoint e promises: an object
// with its array member (choices for chat and completions, data for
// embeddings, output for the Responses API). An upstream answering 200
// with JSON of another shape would otherwise reach the client as a success
// it cannot read; the error wraps ErrMalformed (answered 502
// upstream_malformed).
func CheckAnswer(e Endpoint, body []byte) error {
	_, err := ScanAnswer(body, AnswerMember(e))
	return err
}

// CheckMember is CheckAnswer for an answer of another API (Anthropic's
// Messages API promises "content"): body must be a JSON object with member
// as an array.
func CheckMember(body []byte, member string) error {
	_, err := ScanAnswer(body, member)
	return err
}

// Answer is what ScanAnswer reads of an answer: its top-level usage and
// service_tier members as written ("" when absent).
type Answer struct {
	Usage, ServiceTier string
}

// ScanAnswer is CheckMember that also returns the answer's usage and
// service_tier members, in one pass over body: validity (as ValidJSON:
// what encoding/json accepts, at most MaxJSONDepth deep), the object,
// member, usage and service_tier. A later reader parses only those.
func ScanAnswer(body []byte, member string) (Answer, error) {
	keys := [3]string{member, "usage", "service_tier"}
	var fields [3]rawjson.Field
	if err := rawjson.Scan(body, MaxJSONDepth, keys[:], fields[:]); err != nil {
		switch {
		case errors.Is(err, rawjson.ErrUTF8):
			// encoding/json accepts it, and the answer is relayed as sent.
		case errors.Is(err, rawjson.ErrNotObject):
			return Answer{}, fmt.Errorf("%w: the answer is not a JSON object", ErrMalformed)
		default:
			return Answer{}, fmt.Errorf("%w: body is not JSON", ErrMalformed)
		}
	}
	if raw := fields[0].Raw; raw == "" || raw[0] != '[' {
		return Answer{}, fmt.Errorf("%w: the answer has no %q array", ErrMalformed, member)
	}
	return Answer{Usage: fields[1].Raw, ServiceTier: fields[2].Raw}, nil
}
