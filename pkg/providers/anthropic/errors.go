package anthropic

import "github.com/tollgate/tollgate/pkg/rawjson"

// Anthropic error types (https://docs.anthropic.com/en/api/errors).
const (
	ErrInvalidRequest  = "invalid_request_error"
	ErrAuthentication  = "authentication_error"
	ErrPermission      = "permission_error"
	ErrNotFound        = "not_found_error"
	ErrRequestTooLarge = "request_too_large"
	ErrRateLimit       = "rate_limit_error"
	ErrAPI             = "api_error"
	ErrOverloaded      = "overloaded_error"
)

// ErrorType returns the Anthropic error type for an HTTP status, as the
// gateway answers clients of POST /v1/messages: 400 (and any other 4xx not
// listed) invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 and 529 overloaded_error, other 5xx api_error.
func ErrorType(status int) string {
	switch status {
	case 401:
		return ErrAuthentication
	case 403:
		return ErrPermission
	case 404:
		return ErrNotFound
	case 413:
		return ErrRequestTooLarge
	case 429:
		return ErrRateLimit
	case 503, 529:
		return ErrOverloaded
	}
	if status >= 500 {
		return ErrAPI
	}
	return ErrInvalidRequest
}

// ErrorBody returns an Anthropic error body:
// {"type":"error","error":{"type":errType,"message":message}}.
func ErrorBody(errType, message string) []byte {
	return appendErrorObject(make([]byte, 0, 48+len(errType)+len(message)), errType, message)
}

// appendErrorObject appends the error object of bodies and error events.
func appendErrorObject(dst []byte, errType, message string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = rawjson.AppendString(dst, errType)
	dst = append(dst, `,"message":`...)
	dst = rawjson.AppendString(dst, message)
	return append(dst, "}}"...)
}
