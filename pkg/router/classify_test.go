package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// timeoutErr is a net.Error that timed out, like fasthttp.ErrTimeout.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		status int
		err    error
		body   string
		before bool
		want   Class
	}{
		{name: "200", status: 200, before: true, want: Success},
		{name: "201", status: 201, before: true, want: Success},

		// Transport errors.
		{name: "connection refused", err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, before: true, want: Connect},
		{name: "dial timeout is a connection failure", err: &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, before: true, want: Connect},
		{name: "connection reset", err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, before: true, want: Connect},
		{name: "closed before first byte", err: io.ErrUnexpectedEOF, before: true, want: Connect},
		{name: "read timeout", err: timeoutErr{}, before: true, want: Timeout},
		{name: "wrapped deadline", err: fmt.Errorf("read: %w", os.ErrDeadlineExceeded), before: true, want: Timeout},
		{name: "context deadline", err: context.DeadlineExceeded, before: true, want: Timeout},
		{name: "client gone", err: fmt.Errorf("call: %w", context.Canceled), before: true, want: Canceled},

		// Rate limits and quota.
		{name: "openai 429 rate limit", status: 429, before: true, want: RateLimited,
			body: `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
		{name: "openai 429 insufficient quota", status: 429, before: true, want: Quota,
			body: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{name: "anthropic 429", status: 429, before: true, want: RateLimited,
			body: `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`},
		{name: "anthropic credit balance", status: 400, before: true, want: Quota,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`},
		{name: "gemini quota", status: 429, before: true, want: Quota,
			body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}`},
		{name: "gemini resource exhausted", status: 429, before: true, want: RateLimited,
			body: `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`},
		{name: "402", status: 402, before: true, want: Quota},
		{name: "403 billing disabled", status: 403, before: true, want: Quota,
			body: `{"error":{"code":403,"message":"This API method requires billing to be enabled.","status":"PERMISSION_DENIED"}}`},

		// Context length.
		{name: "openai context length", status: 400, before: true, want: ContextLength,
			body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`},
		{name: "vllm context length", status: 400, before: true, want: ContextLength,
			body: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","code":400}`},
		{name: "anthropic prompt too long", status: 400, before: true, want: ContextLength,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215234 tokens > 200000 maximum"}}`},
		{name: "anthropic context limit", status: 400, before: true, want: ContextLength,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 187254 + 20000 > 200000"}}`},
		{name: "gemini token count", status: 400, before: true, want: ContextLength,
			body: `{"error":{"code":400,"message":"The input token count (1250000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`},
		{name: "bedrock input too long", status: 400, before: true, want: ContextLength,
			body: `{"message":"Input is too long for requested model."}`},

		// Content policy.
		{name: "azure content filter", status: 400, before: true, want: ContentPolicy,
			body: `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}`},
		{name: "openai content policy", status: 400, before: true, want: ContentPolicy,
			body: `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`},
		{name: "anthropic content filtering", status: 400, before: true, want: ContentPolicy,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"}}`},

		// Other 4xx and 5xx.
		{name: "400 bad parameter", status: 400, before: true, want: ClientError,
			body: `{"error":{"message":"Unrecognized request argument supplied: foo","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "404 model", status: 404, before: true, want: ClientError,
			body: `{"error":{"message":"The model gpt-5x does not exist","type":"invalid_request_error","code":"model_not_found"}}`},
		{name: "422", status: 422, before: true, want: ClientError},
		{name: "401", status: 401, before: true, want: Auth,
			body: `{"error":{"message":"Incorrect API key provided: sk-xxx.","type":"invalid_request_error","code":"invalid_api_key"}}`},
		{name: "403", status: 403, before: true, want: Auth},
		{name: "408", status: 408, before: true, want: Timeout},
		{name: "500", status: 500, before: true, want: ServerError},
		{name: "502 with a body", status: 502, before: true, want: ServerError, body: "<html>Bad Gateway</html>"},
		{name: "503", status: 503, before: true, want: ServerError},
		{name: "504", status: 504, before: true, want: ServerError},
		{name: "anthropic overloaded 529", status: 529, before: true, want: ServerError,
			body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{name: "mid-stream failure", err: io.ErrUnexpectedEOF, before: false, want: Connect},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Classify(tt.status, tt.err, []byte(tt.body), tt.before)
			if o.Class != tt.want || o.Started == tt.before {
				t.Fatalf("Classify = %v (started %v), want %v (started %v)", o.Class, o.Started, tt.want, !tt.before)
			}
		})
	}
}

func TestClassifyScansOnlyTheStart(t *testing.T) {
	body := make([]byte, scanLimit+100)
	for i := range body {
		body[i] = 'x'
	}
	copy(body[scanLimit+10:], "context_length_exceeded")
	if got := Classify(400, nil, body, true).Class; got != ClientError {
		t.Fatalf("Classify = %v, want client_error: the phrase is beyond the scan limit", got)
	}
}

func TestClassNames(t *testing.T) {
	for c := Success; c < numClasses; c++ {
		if c.String() == "" || c.String() == "unknown" {
			t.Errorf("class %d has no name", c)
		}
	}
	if Class(200).String() != "unknown" {
		t.Error("out of range class has a name")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		v    string
		want time.Duration
	}{
		{"empty", "", 0},
		{"seconds", "30", 30 * time.Second},
		{"zero", "0", 0},
		{"capped", "999999999999", time.Hour},
		{"http date", "Sat, 01 Mar 2025 12:00:20 GMT", 20 * time.Second},
		{"date in the past", "Sat, 01 Mar 2025 11:00:00 GMT", 0},
		{"fractional", "1.5", 0},
		{"garbage", "soon", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseRetryAfter([]byte(tt.v), now); got != tt.want {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %v", tt.v, got, tt.want)
			}
		})
	}
}

func TestClassifyWrapped(t *testing.T) {
	err := fmt.Errorf("upstream: %w", errors.Join(timeoutErr{}))
	if got := Classify(0, err, nil, true).Class; got != Timeout {
		t.Fatalf("wrapped timeout: %v", got)
	}
}
