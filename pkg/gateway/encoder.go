package gateway

import (
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/providers/openai"
)

// encoder turns the events a providers.Stream writes (the OpenAI chat
// chunks of a translated target, or a native stream's own events) into the
// event sequence of the API the client called: the Messages API
// (/v1/messages), the Responses API (/v1/responses) or the Gemini API
// (/v1beta/models/...). The relay feeds it each Stream.Event output,
// finishes it when the upstream ended without its terminator, and has it
// write a failure in the client's format.
type encoder interface {
	Events(dst, events []byte) ([]byte, error)
	Finish(dst []byte) []byte
	Closed() bool
	Release()
	// fail writes e as the format's error event; nothing follows it.
	fail(dst []byte, e *apiError) []byte
}

// messagesEncoder writes Anthropic events.
type messagesEncoder struct{ *anthropic.Encoder }

func (m messagesEncoder) fail(dst []byte, e *apiError) []byte {
	return m.Fail(dst, anthropic.ErrorType(e.Status), e.Message)
}

// responsesEncoder writes Responses API events.
type responsesEncoder struct{ *openai.ResponsesEncoder }

func (r responsesEncoder) fail(dst []byte, e *apiError) []byte {
	return r.Fail(dst, orDefault(e.Code, e.Type), e.Message)
}

// statusFailer is an encoder whose error event is written from the HTTP
// status: the Gemini API's (gemini.Encoder, and gemini.Passthrough for a
// native stream).
type statusFailer interface {
	Events(dst, events []byte) ([]byte, error)
	Finish(dst []byte) []byte
	Closed() bool
	Release()
	Fail(dst []byte, status int, message string) []byte
}

// geminiEncoder writes Gemini API events.
type geminiEncoder struct{ statusFailer }

func (g geminiEncoder) fail(dst []byte, e *apiError) []byte {
	return g.Fail(dst, e.Status, e.Message)
}
