package gateway

import (
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/providers/openai"
)

// encoder turns the OpenAI chat chunks of a translated target's stream
// into the event sequence of the API the client called: the Messages API
// (/v1/messages) or the Responses API (/v1/responses). The relay feeds it
// each Stream.Event output, finishes it when the upstream ended without
// its terminator, and has it write a failure in the client's format.
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
