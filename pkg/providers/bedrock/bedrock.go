// Package bedrock is the provider for Amazon Bedrock through the Converse
// API: POST {base}/model/{modelId}/converse, and /converse-stream for
// streams, whose answer is an AWS binary event stream
// (application/vnd.amazon.eventstream). Requests are signed with AWS
// Signature Version 4 (service "bedrock") by the AWS SDK's signer, or carry
// a Bedrock API key as a bearer token when no access key is configured.
//
// The gateway speaks OpenAI chat completions; this package translates.
//
// Request (OpenAI chat -> Converse):
//   - system and developer messages, wherever they sit, become the system
//     blocks, in order; empty texts are skipped (Converse refuses them).
//   - user and assistant messages become messages of text blocks; image_url
//     parts become image blocks: base64 data URLs of PNG, JPEG, GIF or WebP
//     as bytes, s3:// URLs as an s3Location (format from the extension).
//     Converse cannot take http(s) image URLs and the gateway never fetches
//     them: they are refused. The image detail is dropped.
//   - assistant tool_calls become toolUse blocks (the arguments string is
//     parsed into the input document; empty arguments are {}); role "tool"
//     messages become toolResult blocks of a user message.
//   - consecutive messages of one role (such as parallel tool results) are
//     merged into one message, since Converse requires alternating roles.
//   - tools become toolConfig.tools (toolSpec with inputSchema.json; no
//     parameters means an empty object schema); tool_choice "auto" is the
//     Converse default, "required" is {"any":{}}, a named function is
//     {"tool":{"name":...}}. Converse has no "none": such a request is sent
//     without tools, and refused when the conversation holds tool calls or
//     results (Converse then requires toolConfig).
//   - max_tokens or max_completion_tokens (or the gateway's clamp, which
//     overrides both) -> inferenceConfig.maxTokens; temperature ->
//     temperature; top_p -> topP; stop -> stopSequences.
//
// The other top-level members are mapped, dropped or refused (with a
// *providers.ParamError naming the member) as Policy says; the Providers
// page's table (docs/providers.md) is generated from it. Also refused:
// content parts other than text, image_url and refusal, and the
// completions, embeddings and responses endpoints.
//
// Dropped, as they do not change the answer's content: message names and
// tool strictness.
//
// Answer (Converse -> OpenAI): text blocks are concatenated into the
// message content, toolUse blocks become tool_calls with the input
// serialized as the arguments string, reasoning and other blocks are
// dropped. stopReason end_turn and stop_sequence map to "stop", max_tokens
// and model_context_window_exceeded to "length", tool_use to "tool_calls",
// content_filtered and guardrail_intervened to "content_filter", anything
// else to "stop". Usage: prompt_tokens is inputTokens plus the cache reads
// and writes (Bedrock counts those apart, OpenAI includes them), cached
// tokens are cacheReadInputTokens, cache writes (billed at the cache-write
// price) cacheWriteInputTokens; Bedrock reports no reasoning tokens.
// Converse answers carry no id: the OpenAI id is "chatcmpl-" and the
// gateway's request id (random hex when there is none).
//
// Streams: messageStart sends the role chunk, contentBlockStart (toolUse)
// a tool call's id and name, contentBlockDelta text or tool-call argument
// fragments, messageStop the one chunk with the finish reason, and the
// metadata frame that follows it the usage chunk (when the client asked)
// and [DONE]. Exception frames (throttlingException,
// modelStreamErrorException, ...) fail the stream.
package bedrock

import (
	"fmt"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// Options configure one Bedrock provider.
type Options struct {
	// Name identifies the provider in errors.
	Name string
	// BaseURL is the runtime endpoint. Default
	// https://bedrock-runtime.{Region}.amazonaws.com.
	BaseURL string
	// APIKey is a Bedrock API key, sent as a bearer token when AccessKeyID
	// is empty. A secret: never logged.
	APIKey string
	// Region signs requests and picks the default endpoint. When empty it
	// is read from a bedrock-runtime.{region}.amazonaws.com BaseURL.
	Region string
	// AccessKeyID, SecretAccessKey and SessionToken (optional, for
	// temporary credentials) sign requests with SigV4. Secrets: never logged.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Headers are sent, and signed, on every request.
	Headers map[string]string
	// Now is the clock for signatures and the created time of answers.
	// Default time.Now.
	Now func() time.Time
}

// Provider is a Bedrock upstream. Safe for concurrent use.
type Provider struct {
	name    string
	scheme  string
	host    string // as sent and signed, without a default port
	base    string // base path, no trailing slash
	signer  *signer
	bearer  []byte // "Bearer <key>" when no access key is set; a secret
	headers [][2]string
	now     func() time.Time
}

var _ providers.Provider = (*Provider)(nil)

// DefaultBaseURL is the public runtime endpoint of an AWS region, used when
// Options.BaseURL is empty.
func DefaultBaseURL(region string) string {
	return "https://bedrock-runtime." + region + ".amazonaws.com"
}

// New builds a provider from its options.
func New(o Options) (*Provider, error) {
	if o.BaseURL == "" {
		if o.Region == "" {
			return nil, fmt.Errorf("provider %s: bedrock needs a region or a base_url", o.Name)
		}
		o.BaseURL = DefaultBaseURL(o.Region)
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider %s: base_url %q is not an http(s) URL", o.Name, o.BaseURL)
	}
	if o.Region == "" {
		o.Region = regionOf(u.Hostname())
	}
	if o.Region == "" {
		return nil, fmt.Errorf("provider %s: bedrock needs a region to sign requests", o.Name)
	}
	p := &Provider{
		name:   o.Name,
		scheme: u.Scheme,
		host:   u.Host,
		base:   strings.TrimRight(u.EscapedPath(), "/"),
		signer: newSigner(o.Region, o.AccessKeyID, o.SecretAccessKey, o.SessionToken),
		now:    o.Now,
	}
	if port := u.Port(); (port == "443" && u.Scheme == "https") || (port == "80" && u.Scheme == "http") {
		p.host = strings.TrimSuffix(u.Host, ":"+port) // what the signer signs
	}
	if p.now == nil {
		p.now = time.Now
	}
	if o.AccessKeyID == "" && o.APIKey != "" {
		p.bearer = []byte("Bearer " + o.APIKey)
	}
	for k, v := range o.Headers {
		p.headers = append(p.headers, [2]string{k, v})
	}
	return p, nil
}

// regionOf reads the region of a bedrock-runtime[-fips].{region}.amazonaws.com host.
func regionOf(host string) string {
	rest, ok := strings.CutPrefix(host, "bedrock-runtime.")
	if !ok {
		rest, ok = strings.CutPrefix(host, "bedrock-runtime-fips.")
	}
	region, _, found := strings.Cut(rest, ".")
	if !ok || !found {
		return ""
	}
	return region
}

// Build writes the signed Converse request for a chat call. Other
// endpoints are refused. The client sending it must set
// DisablePathNormalizing (the gateway's does): fasthttp would otherwise
// unescape the model id in the path, which the signature covers.
func (p *Provider) Build(req *fasthttp.Request, c *providers.Call) error {
	if c.Endpoint != providers.Chat {
		return paramError("model", fmt.Sprintf("the %s endpoint (Bedrock Converse serves chat completions only)", c.Endpoint))
	}
	// The model id is escaped as the AWS SDK does (":" in "...-v1:0", "/" in
	// ARNs), by the one escaper of client-influenced URL parts, and the
	// signature covers the escaped path.
	var pathBuf [256]byte
	path := append(pathBuf[:0], p.base...)
	path = append(path, "/model/"...)
	path, err := providers.AppendPathSegment(path, "model", c.Model)
	if err != nil {
		return err
	}
	if c.Stream {
		path = append(path, "/converse-stream"...)
	} else {
		path = append(path, "/converse"...)
	}
	buf, err := appendConverse(req.SwapBody(nil)[:0], c)
	req.SwapBody(buf)
	if err != nil {
		return err
	}
	req.Header.SetMethod(fasthttp.MethodPost)
	uri := req.URI()
	uri.SetScheme(p.scheme)
	uri.SetHost(p.host)
	uri.SetPathBytes(path)
	req.Header.SetContentType("application/json")
	for _, h := range p.headers {
		req.Header.Set(h[0], h[1])
	}
	if len(c.RequestID) > 0 {
		req.Header.SetBytesV("X-Request-Id", c.RequestID)
	}
	if p.bearer != nil {
		req.Header.SetBytesV("Authorization", p.bearer)
		return nil
	}
	return p.signer.signFast(req, p.scheme, p.host, path, p.headers, p.now())
}

// ErrorMessage reads the message of a Bedrock error body ({"message":...},
// or "Message" as some AWS front ends spell it).
func (p *Provider) ErrorMessage(body []byte) string {
	if !providers.ValidJSON(body) {
		return ""
	}
	s := bytesString(body)
	for _, k := range [...]string{"message", "Message", "error.message"} {
		if m := gjson.Get(s, k); m.Type == gjson.String {
			return m.String()
		}
	}
	return ""
}

// appendID appends the OpenAI id of an answer: "chatcmpl-" and the
// request id, or random hex without one.
func appendID(dst []byte, c *providers.Call) []byte {
	dst = append(dst, "chatcmpl-"...)
	if len(c.RequestID) > 0 {
		return rawjson.AppendStringBody(dst, bytesString(c.RequestID))
	}
	v := rand.Uint64()
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(v>>uint(shift))&0xf])
	}
	return dst
}
