package router

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// Class is what an upstream call's result was, as far as routing cares.
type Class uint8

// Classes of call results. The FallbackOn trigger of each is in its comment;
// classes without one never cause another call.
const (
	Success       Class = iota // 2xx
	Connect                    // connect: the call failed below HTTP (refused, reset, cut)
	Timeout                    // timeout: no answer in time (also HTTP 408)
	RateLimited                // 429: the upstream is rate limiting
	ServerError                // 5xx: the upstream failed (any 5xx, including 529)
	Quota                      // quota: out of quota or credit, billing (402, or the body says so)
	ContextLength              // context_length: the prompt does not fit the model
	ContentPolicy              // content_policy: refused by the provider's content policy
	Auth                       // auth: the upstream refused the gateway's credentials (401, 403)
	ClientError                // other 4xx: the request is wrong; never retried
	Canceled                   // the caller gave up (client gone, hedge lost); says nothing about the target
	numClasses
)

var classNames = [numClasses]string{"success", "connect", "timeout", "rate_limited", "server_error",
	"quota", "context_length", "content_policy", "auth", "client_error", "canceled"}

// String returns the class name, e.g. "rate_limited", for logs and labels.
func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "unknown"
}

// triggerClass maps a config.Routing FallbackOn value to its class.
func triggerClass(name string) (Class, bool) {
	switch name {
	case config.TriggerConnect:
		return Connect, true
	case config.TriggerTimeout:
		return Timeout, true
	case config.TriggerRateLimited:
		return RateLimited, true
	case config.TriggerServerError:
		return ServerError, true
	case config.TriggerQuota:
		return Quota, true
	case config.TriggerContextLength:
		return ContextLength, true
	case config.TriggerContentPolicy:
		return ContentPolicy, true
	case config.TriggerAuth:
		return Auth, true
	}
	return 0, false
}

// effect returns what the class says about the target's health: a request
// the target rejected on its merits shows the target is up.
func (c Class) effect() effect {
	switch c {
	case Success, ClientError, ContextLength, ContentPolicy:
		return healthy
	case Canceled:
		return neutral
	}
	return failed
}

// Outcome is the result of one call.
type Outcome struct {
	Class Class
	// Started is set when part of the answer had already gone to the
	// client: the call cannot be retried whatever its class.
	Started bool
	// RetryAfter is the upstream's Retry-After (see ParseRetryAfter): the
	// target is skipped by every request until it has passed, and a retry
	// of it waits for it.
	RetryAfter time.Duration
}

// scanLimit bounds how much of an error body Classify reads.
const scanLimit = 8 << 10

// Classify turns an upstream call's result into an Outcome: status is the
// HTTP status (ignored when err is set), err the transport error, body the
// upstream's error body (OpenAI, Anthropic, Gemini and similar shapes are
// recognized by their codes and messages), and beforeFirstByte tells that
// nothing had been sent to the client yet. It does not allocate.
func Classify(status int, err error, body []byte, beforeFirstByte bool) Outcome {
	o := Outcome{Started: !beforeFirstByte}
	if err != nil {
		o.Class = classifyError(err)
		return o
	}
	if len(body) > scanLimit {
		body = body[:scanLimit]
	}
	switch {
	case status >= 200 && status < 300:
		o.Class = Success
	case status == http.StatusTooManyRequests:
		o.Class = RateLimited
		if isQuota(body) {
			o.Class = Quota
		}
	case status == http.StatusPaymentRequired:
		o.Class = Quota
	case status == http.StatusRequestTimeout:
		o.Class = Timeout
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		o.Class = Auth
		switch {
		case isQuota(body):
			o.Class = Quota
		case isContentPolicy(body):
			o.Class = ContentPolicy
		}
	case status >= 400 && status < 500:
		o.Class = classifyBody(body)
	default: // 5xx and anything unexpected
		o.Class = ServerError
	}
	return o
}

// classifyBody classifies a 4xx answer by its error body.
func classifyBody(body []byte) Class {
	switch {
	case isContextLength(body):
		return ContextLength
	case isQuota(body):
		return Quota
	case isContentPolicy(body):
		return ContentPolicy
	}
	return ClientError
}

func classifyError(err error) Class {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.As(err, &op) && op.Op == "dial":
		return Connect // a dial timeout is a connection failure
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return Timeout
	}
	return Connect
}

// Error-body phrases, lower case. Each names the provider shape it covers.
var (
	contextPhrases = []string{
		"context_length_exceeded",           // OpenAI, Azure code
		"maximum context length",            // OpenAI, vLLM, Mistral messages
		"context window",                    // Ollama, llama.cpp, Anthropic "exceeds the context window"
		"context limit",                     // Anthropic "input length and `max_tokens` exceed context limit"
		"prompt is too long",                // Anthropic
		"exceeds the maximum number of tok", // Gemini "input token count ... exceeds the maximum number of tokens allowed"
		"input is too long",                 // Bedrock
		"too many tokens",                   // Cohere, others
	}
	quotaPhrases = []string{
		"insufficient_quota",          // OpenAI code
		"exceeded your current quota", // OpenAI, Gemini
		"billing",                     // OpenAI "plan and billing details", Anthropic "Plans & Billing", Gemini BILLING_DISABLED
		"credit balance",              // Anthropic "Your credit balance is too low"
		"quota exceeded",              // Azure, Vertex
		"payment required",
	}
	policyPhrases = []string{
		"content_policy_violation",  // OpenAI code
		"content_filter",            // Azure code
		"content filter",            // Anthropic "content filtering policy"
		"content management policy", // Azure message
		"safety system",             // OpenAI "rejected as a result of our safety system"
		"usage policies",            // OpenAI "flagged for potentially violating our usage policies"
		"responsible ai",            // Azure
	}
)

func isContextLength(b []byte) bool { return containsAny(b, contextPhrases) }
func isQuota(b []byte) bool         { return containsAny(b, quotaPhrases) }
func isContentPolicy(b []byte) bool { return containsAny(b, policyPhrases) }

// containsAny reports whether b contains one of the lower-case phrases,
// ignoring ASCII case.
func containsAny(b []byte, phrases []string) bool {
	for _, p := range phrases {
		if containsFold(b, p) {
			return true
		}
	}
	return false
}

func containsFold(b []byte, lower string) bool {
	n := len(lower)
	first := lower[0]
	for i := 0; i+n <= len(b); i++ {
		if toLower(b[i]) != first {
			continue
		}
		j := 1
		for j < n && toLower(b[i+j]) == lower[j] {
			j++
		}
		if j == n {
			return true
		}
	}
	return false
}

func toLower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// maxRetryAfter caps a Retry-After, so a wrong header cannot sideline a
// target for long.
const maxRetryAfter = time.Hour

// ParseRetryAfter reads a Retry-After header value: seconds or an HTTP date
// (relative to now). It returns 0 when v is empty, unreadable or in the
// past, and at most one hour.
func ParseRetryAfter(v []byte, now time.Time) time.Duration {
	if len(v) == 0 {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		var n int64
		for _, c := range v {
			if c < '0' || c > '9' {
				return 0
			}
			if n = n*10 + int64(c-'0'); n > int64(maxRetryAfter/time.Second) {
				return maxRetryAfter
			}
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(string(v))
	if err != nil {
		return 0
	}
	return min(max(0, t.Sub(now)), maxRetryAfter)
}
