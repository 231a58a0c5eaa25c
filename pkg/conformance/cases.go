package conformance

import (
	"strings"
	"time"
)

// Case is one request of the matrix and what the gateway must make of it.
type Case struct {
	Name    string
	Summary string // the expectation, one line
	Stream  bool
	Model   string // the model requested
	Mock    string // the request body's "mock" object: the fault (pkg/mockllm)
	// Settle is a pause after the case: a 429 with Retry-After: 1 rightly
	// makes the gateway skip the primary for a second.
	Settle time.Duration
	want   want
}

// served is which target must answer.
type served uint8

const (
	servedNone    served = iota // no upstream is called
	servedPrimary               // the route's own target
	servedBackup                // the fallback model's target
)

// ending is how a stream must end.
type ending uint8

const (
	endNone  ending = iota // not a stream
	endDone                // every event, then data: [DONE]
	endError               // the events so far, then one error event; no [DONE]
)

// billing is how the request must be billed.
type billing uint8

const (
	billReported  billing = iota // the mock's exact token counts
	billEstimated                // the o200k count of the prompt and of the text delivered
	billZero                     // no tokens, no cost
)

// want is a case's expectation for each column.
type want struct {
	status   int    // HTTP status the client gets
	served   served // who answers (x-tollgate-provider)
	fallback bool   // the request moves to the fallback model
	errCode  string // code of the error body (status != 200)
	errText  string // the provider's reason the error message must carry
	end      ending
	eventErr string        // code of the stream's error event (endError)
	chunks   int           // content chunks (streams) or words (non-stream) delivered
	paced    time.Duration // least spread between the first and last content chunk
	bill     billing
	evStatus int    // the usage event's status_code
	evError  string // the usage event's error_type
}

// chunks is the answer length every case asks the mock for.
const chunks = 6

// Cases returns the fault matrix for routes, in the order it runs: every
// case that fails the primary is followed by one the primary answers, so a
// run never fails it twice in a row (a circuit breaker left on stays
// closed).
func Cases(routes Routes) []Case {
	m := routes.Model
	ok := want{status: 200, served: servedPrimary, chunks: chunks, bill: billReported, evStatus: 200}
	okStream := ok
	okStream.end = endDone
	fellBack := okStream
	fellBack.served, fellBack.fallback = servedBackup, true
	cut := func(n int, code string) want {
		return want{status: 200, served: servedPrimary, chunks: n, end: endError, eventErr: code,
			bill: billEstimated, evStatus: 200, evError: code}
	}
	refused := func(text string) want {
		return want{status: 400, served: servedPrimary, errCode: "upstream_rejected", errText: text,
			bill: billZero, evStatus: 400, evError: "upstream_rejected"}
	}
	midStream := func(status string) want {
		w := cut(2, "upstream_error")
		w.errText = "HTTP " + status
		return w
	}
	estimated := ok
	estimated.bill = billEstimated
	estimatedStream := okStream
	estimatedStream.bill = billEstimated
	slow := okStream
	slow.chunks, slow.paced = 5, 600*time.Millisecond
	return []Case{
		{Name: "non-stream", Model: m, Mock: `{"chunks":6}`, want: ok,
			Summary: "the primary answers; billed with the mock's tokens at the primary's price"},
		{Name: "stream", Model: m, Stream: true, Mock: `{"chunks":6}`, want: okStream,
			Summary: "the primary streams 6 chunks, one finish_reason, then [DONE]; billed with the mock's tokens"},
		{Name: "stream-cut", Model: m, Stream: true, Mock: `{"chunks":8,"cut_after":3}`, want: cut(3, "upstream_stream_cut"),
			Summary: "upstream closes after 3 chunks: 3 chunks, then an upstream_stream_cut error event, no [DONE]; billed an estimate of what was delivered"},
		{Name: "bad-usage", Model: m, Mock: `{"chunks":6,"bad_usage":true}`, want: estimated,
			Summary: "usage with counts that are not integers: answer served, billing estimated (the event says so)"},
		{Name: "429-before-first-byte", Model: m, Stream: true, Mock: `{"chunks":6,"status":429}`, want: fellBack,
			Settle:  1200 * time.Millisecond,
			Summary: "primary answers 429: the fallback serves the whole stream (2 attempts); billed at the fallback's price"},
		{Name: "content-filter", Model: m, Mock: `{"refusal":true}`, want: refused("safety system"),
			Summary: "primary refuses (content policy): no fallback, the client gets 400 with the provider's reason; billed zero"},
		{Name: "529-before-first-byte", Model: m, Stream: true, Mock: `{"chunks":6,"status":529}`, want: fellBack,
			Summary: "primary answers 529 (overloaded): the fallback serves the whole stream (2 attempts)"},
		{Name: "context-length", Model: m, Mock: `{"context_overflow":true}`, want: refused("maximum context length"),
			Summary: "prompt over the context window: 400 with the provider's reason, no fallback; billed zero"},
		{Name: "429-after-first-byte", Model: m, Stream: true, Mock: `{"chunks":8,"error_event_after":2,"error_event_status":429}`,
			want:    midStream("429"),
			Summary: "primary sends a 429 error event after 2 chunks: no fallback possible; 2 chunks, then an upstream_error event; billed an estimate"},
		{Name: "bad-usage-stream", Model: m, Stream: true, Mock: `{"chunks":6,"bad_usage":true}`, want: estimatedStream,
			Summary: "stream whose usage chunk is malformed: stream served with [DONE], billing estimated"},
		{Name: "529-after-first-byte", Model: m, Stream: true, Mock: `{"chunks":8,"error_event_after":2,"error_event_status":529}`,
			want:    midStream("529"),
			Summary: "primary sends an overloaded error event after 2 chunks: 2 chunks, then an upstream_error event; billed an estimate"},
		{Name: "slow-stream", Model: m, Stream: true, Mock: `{"chunks":5,"chunk_delay_ms":300,"first_chunk_delay_ms":300}`, want: slow,
			Summary: "chunks 300 ms apart arrive as they are made, no timeout trips, [DONE]; billed with the mock's tokens"},
		{Name: "garbage-sse", Model: m, Stream: true, Mock: `{"chunks":6,"garbage":true}`, want: cut(0, "upstream_malformed"),
			Summary: "upstream sends non-SSE bytes: the client gets a clean upstream_malformed error event, no garbage, no [DONE]"},
		{Name: "unknown-model", Model: routes.UnknownModel, Mock: `{}`,
			want:    want{status: 404, served: servedNone, errCode: "model_not_found", bill: billZero, evStatus: 404, evError: "model_not_found"},
			Summary: "unknown model: 404 model_not_found before any upstream call; billed zero"},
	}
}

// prompt is the user message of the case's request.
func (c *Case) prompt() string { return "Tollgate conformance case " + c.Name }

// mockPromptTokens is mockllm's documented prompt count for the request:
// the words of the message plus 3.
func (c *Case) mockPromptTokens() uint64 { return uint64(len(strings.Fields(c.prompt())) + 3) }

// requestID is the case's x-request-id in run.
func (c *Case) requestID(run string) string { return "verify-" + run + "-" + c.Name }
