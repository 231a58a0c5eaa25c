package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/router"
)

// Error types, as in OpenAI's error bodies. Clients branch on type and code.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typeBudget         = "budget_exceeded"
	typeUpstream       = "upstream_error"
	typeTimeout        = "timeout_error"
	typeUnavailable    = "service_unavailable"
	typeServer         = "server_error"
)

// apiError is an error answered to the client: an HTTP status and an
// OpenAI-shaped body {"error":{"message","type","param","code"}}.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, in seconds, is sent as Retry-After when positive.
	RetryAfter int
	// Rate, on a rate limit refusal, is sent as x-ratelimit-* headers.
	Rate *rateShare
}

// rateShare is the rate limit a request was refused by: the global rpm and
// tpm (0: none) and the gateways they are divided among.
type rateShare struct {
	rpm, tpm, gateways int64
}

// share formats this gateway's share of limit, to two decimals.
func (r *rateShare) share(limit int64) string {
	return strconv.FormatFloat(math.Floor(float64(limit)*100/float64(r.gateways))/100, 'f', -1, 64)
}

// setHeaders sets x-ratelimit-limit-requests and -tokens to the share this
// gateway enforces, x-ratelimit-global-limit-requests and -tokens to the
// limits, and x-ratelimit-gateways to the gateways dividing them.
func (r *rateShare) setHeaders(c *fiber.Ctx) {
	if r.rpm > 0 {
		c.Set("x-ratelimit-limit-requests", r.share(r.rpm))
		c.Set("x-ratelimit-global-limit-requests", strconv.FormatInt(r.rpm, 10))
	}
	if r.tpm > 0 {
		c.Set("x-ratelimit-limit-tokens", r.share(r.tpm))
		c.Set("x-ratelimit-global-limit-tokens", strconv.FormatInt(r.tpm, 10))
	}
	c.Set("x-ratelimit-gateways", strconv.FormatInt(r.gateways, 10))
}

func (e *apiError) Error() string { return e.Message }

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// body encodes the OpenAI error shape; param and code are null when empty,
// but every key is always present (the SDKs read them unconditionally).
func (e *apiError) body() []byte {
	d := errorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	b, _ := json.Marshal(errorBody{Error: d}) // cannot fail: strings only
	return b
}

// writeError answers e. 4xx answers other than 429 tell the SDKs not to retry
// (x-should-retry: false); 429 carries Retry-After when a wait helps, and a
// budget refusal is never worth an automatic retry.
func writeError(c *fiber.Ctx, e *apiError) error {
	c.Status(e.Status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if e.Rate != nil {
		e.Rate.setHeaders(c)
	}
	switch {
	case e.RetryAfter > 0:
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(e.RetryAfter))
	case e.Status >= 400 && e.Status < 500 && (e.Status != 429 || e.Type == typeBudget):
		c.Set("x-should-retry", "false")
	}
	return c.Send(e.body())
}

func errBadRequest(code, param, msg string) *apiError {
	return &apiError{Status: fiber.StatusBadRequest, Type: typeInvalidRequest, Code: code, Param: param, Message: msg}
}

// buildError answers a request a provider's builder refused: a
// *providers.ParamError is the client's (400, with the builder's code,
// "unsupported_parameter" by default); anything else is the gateway's.
func buildError(provider string, err error) *apiError {
	var pe *providers.ParamError
	if !errors.As(err, &pe) {
		return &apiError{Status: fiber.StatusInternalServerError, Type: typeServer, Code: "build_failed",
			Message: fmt.Sprintf("cannot build the request for provider %s: %v", provider, err)}
	}
	code := pe.Code
	if code == "" {
		code = "unsupported_parameter"
	}
	if pe.Code == providers.CodeInvalidURLValue {
		return errBadRequest(code, pe.Param, fmt.Sprintf("%s cannot be sent to provider %s: %s", pe.Param, provider, pe.Message))
	}
	return errBadRequest(code, pe.Param, fmt.Sprintf("provider %s cannot honour %s", provider, pe.Message))
}

// captureError refuses a wildcard route's name whose "*" part does not fit
// the route's wildcard_pattern (nil when it fits or the route is exact).
func captureError(plan *router.Plan) *apiError {
	if err := plan.Route().CheckCapture(plan.Capture()); err != nil {
		return errBadRequest(codeInvalidModelName, "model", "invalid model name: "+err.Error())
	}
	return nil
}

// codeInvalidModelName is the code of a model name a wildcard route may
// not pass upstream.
const codeInvalidModelName = "invalid_model_name"
