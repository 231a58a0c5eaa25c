package loadgen

import (
	"errors"
	"net"

	"github.com/valyala/fasthttp"
)

// kind is the outcome of one request: ok, or the first problem found.
// Every response that is not exactly right is counted under one kind and
// never as a success.
type kind uint8

const (
	kindOK kind = iota
	kindStatus4xx
	kindStatus5xx
	kindStatusOther
	kindConnect
	kindTimeout
	kindClosed
	kindTransport
	kindCut
	kindContentType
	kindBadJSON
	kindBadSSE
	kindEmptyContent
	kindBadEmbedding
	kindChunkCount
	kindNoDone
	kindNoFinish
	kindMultipleFinish
	kindNoID
	kindIDMismatch
	kindDataAfterDone
	kindErrorEvent
	kindUsage
	kindUnwantedUsage
	kindDropped
	// kindHeld is a hold-mode stream still open when the hold ended: the
	// expected outcome there, not an error.
	kindHeld
	numKinds
)

// String returns the name used in reports.
func (k kind) String() string {
	switch k {
	case kindOK:
		return "ok"
	case kindStatus4xx:
		return "status_4xx"
	case kindStatus5xx:
		return "status_5xx"
	case kindStatusOther:
		return "status_other"
	case kindConnect:
		return "connect"
	case kindTimeout:
		return "timeout"
	case kindClosed:
		return "closed"
	case kindTransport:
		return "transport"
	case kindCut:
		return "cut"
	case kindContentType:
		return "content_type"
	case kindBadJSON:
		return "bad_json"
	case kindBadSSE:
		return "bad_sse"
	case kindEmptyContent:
		return "empty_content"
	case kindBadEmbedding:
		return "bad_embedding"
	case kindChunkCount:
		return "chunk_count"
	case kindNoDone:
		return "no_done"
	case kindNoFinish:
		return "no_finish"
	case kindMultipleFinish:
		return "multiple_finish"
	case kindNoID:
		return "no_id"
	case kindIDMismatch:
		return "id_mismatch"
	case kindDataAfterDone:
		return "data_after_done"
	case kindErrorEvent:
		return "error_event"
	case kindUsage:
		return "no_usage"
	case kindUnwantedUsage:
		return "unwanted_usage"
	case kindDropped:
		return "dropped"
	case kindHeld:
		return "held"
	}
	return "unknown"
}

// statusKind maps a non-200 status to its kind.
func statusKind(code int) kind {
	switch {
	case code >= 400 && code < 500:
		return kindStatus4xx
	case code >= 500 && code < 600:
		return kindStatus5xx
	}
	return kindStatusOther
}

// transportKind classifies an error returned by the HTTP client or by a
// read of a streamed body.
func transportKind(err error) kind {
	var te interface{ Timeout() bool }
	var op *net.OpError
	switch {
	case errors.Is(err, fasthttp.ErrDialTimeout):
		return kindConnect
	case errors.As(err, &te) && te.Timeout():
		return kindTimeout
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return kindClosed
	case errors.As(err, &op) && op.Op == "dial":
		return kindConnect
	}
	return kindTransport
}
