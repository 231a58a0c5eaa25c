package mockllm

import "sync/atomic"

// Stats is a snapshot of the server's counters since start or the last
// reset, as served by GET /stats.
type Stats struct {
	// Requests counts every request, whatever its path or outcome.
	Requests int64 `json:"requests"`
	// Chat, Completions and Embeddings count requests to those endpoints.
	Chat        int64 `json:"chat"`
	Completions int64 `json:"completions"`
	Embeddings  int64 `json:"embeddings"`
	// Responses counts requests to the Responses API.
	Responses int64 `json:"responses"`
	// StreamsStarted counts streamed answers whose header was sent.
	StreamsStarted int64 `json:"streams_started"`
	// StreamsCompleted counts streams that reached their normal end.
	StreamsCompleted int64 `json:"streams_completed"`
	// StreamsCancelled counts streams the client left: a write failed
	// before the end. Streams cut or garbled on purpose are not counted here.
	StreamsCancelled int64 `json:"streams_cancelled"`
	// FailuresInjected counts requests answered with an injected failure
	// (status, garbage, cut_after, error_event_after).
	FailuresInjected int64 `json:"failures_injected"`
	// PromptTokens and CompletionTokens total the usage of every answer,
	// whether or not the response carried it; a stream that ended early
	// counts only the completion tokens of the chunks actually written.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// UploadBytes totals the file bytes received by uploads (audio
	// transcriptions and translations, files).
	UploadBytes int64 `json:"upload_bytes"`
}

// counters are the live, atomically updated form of Stats.
type counters struct {
	requests, chat, completions, embeddings atomic.Int64
	responses                               atomic.Int64
	streamsStarted, streamsCompleted        atomic.Int64
	streamsCancelled, failuresInjected      atomic.Int64
	promptTokens, completionTokens          atomic.Int64
	uploadBytes                             atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Requests:         c.requests.Load(),
		Chat:             c.chat.Load(),
		Completions:      c.completions.Load(),
		Embeddings:       c.embeddings.Load(),
		Responses:        c.responses.Load(),
		StreamsStarted:   c.streamsStarted.Load(),
		StreamsCompleted: c.streamsCompleted.Load(),
		StreamsCancelled: c.streamsCancelled.Load(),
		FailuresInjected: c.failuresInjected.Load(),
		PromptTokens:     c.promptTokens.Load(),
		CompletionTokens: c.completionTokens.Load(),
		UploadBytes:      c.uploadBytes.Load(),
	}
}

func (c *counters) reset() {
	for _, v := range []*atomic.Int64{
		&c.requests, &c.chat, &c.completions, &c.embeddings, &c.responses,
		&c.streamsStarted, &c.streamsCompleted, &c.streamsCancelled,
		&c.failuresInjected, &c.promptTokens, &c.completionTokens, &c.uploadBytes,
	} {
		v.Store(0)
	}
}
