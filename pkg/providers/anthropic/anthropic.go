package anthropic

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// Defaults of Options.
const (
	DefaultBaseURL   = "https://api.anthropic.com"
	DefaultVersion   = "2023-06-01"
	DefaultMaxTokens = 4096
)

// KeyHeader is the request header that carries the API key.
const KeyHeader = "x-api-key"

// Options configure one Anthropic provider.
type Options struct {
	Name string
	// BaseURL is the API root, without /v1. Default DefaultBaseURL.
	BaseURL string
	// APIKey is sent as x-api-key. A secret: never logged.
	APIKey string
	// Version is the anthropic-version header. Default DefaultVersion.
	Version string
	// Headers are sent on every request.
	Headers map[string]string
	// MaxTokens is the max_tokens sent when neither the budget clamp nor
	// the request sets one (Anthropic requires it). Default DefaultMaxTokens.
	MaxTokens int64
	// Now is the clock for the "created" field. Default time.Now.
	Now func() time.Time
}

// Provider is an Anthropic Messages API upstream. Safe for concurrent use.
type Provider struct {
	name      string
	scheme    string
	host      string
	path      []byte // base path + /v1/messages
	countPath []byte // base path + /v1/messages/count_tokens
	apiKey    []byte // a secret: never logged
	version   []byte
	headers   [][2]string
	maxTokens int64
	now       func() time.Time
}

var _ providers.Provider = (*Provider)(nil)

// New builds a provider from its options.
func New(o Options) (*Provider, error) {
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider %s: base_url %q is not an http(s) URL", o.Name, o.BaseURL)
	}
	base := strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
	p := &Provider{
		name:      o.Name,
		scheme:    u.Scheme,
		host:      u.Host,
		path:      []byte(base + "/v1/messages"),
		countPath: []byte(base + CountTokensPath()),
		apiKey:    []byte(o.APIKey),
		version:   []byte(o.Version),
		maxTokens: o.MaxTokens,
		now:       o.Now,
	}
	if len(p.version) == 0 {
		p.version = []byte(DefaultVersion)
	}
	if p.maxTokens <= 0 {
		p.maxTokens = DefaultMaxTokens
	}
	if p.now == nil {
		p.now = time.Now
	}
	for k, v := range o.Headers {
		p.headers = append(p.headers, [2]string{k, v})
	}
	return p, nil
}

// Build writes the Messages request for an OpenAI chat call. Only the chat
// endpoint is served; a parameter Anthropic cannot honour returns a
// *providers.ParamError.
func (p *Provider) Build(req *fasthttp.Request, c *providers.Call) error {
	if c.Endpoint != providers.Chat {
		return &providers.ParamError{Param: "model", Message: fmt.Sprintf("the Anthropic API serves only /v1/chat/completions, not %s", c.Endpoint)}
	}
	p.setRequestLine(req, p.path, c.Header, false)
	// The body is written into the request's own (pooled) buffer.
	out, err := p.appendRequest(req.SwapBody(nil)[:0], c)
	req.SwapBody(out)
	return err
}

// setRequestLine sets the method, URI and headers of an upstream request.
// native passes the client's anthropic-version through.
func (p *Provider) setRequestLine(req *fasthttp.Request, path []byte, client *fasthttp.RequestHeader, native bool) {
	req.Header.SetMethod(fasthttp.MethodPost)
	uri := req.URI()
	uri.SetScheme(p.scheme)
	uri.SetHost(p.host)
	uri.SetPathBytes(path)
	req.Header.SetContentType("application/json")
	if len(p.apiKey) > 0 {
		req.Header.SetBytesV(KeyHeader, p.apiKey)
	}
	version := p.version
	if native && client != nil {
		if v := client.Peek("anthropic-version"); len(v) > 0 {
			version = v
		}
	}
	req.Header.SetBytesV("anthropic-version", version)
	if client != nil {
		if v := client.Peek("anthropic-beta"); len(v) > 0 {
			req.Header.SetBytesV("anthropic-beta", v)
		}
	}
	for _, h := range p.headers {
		req.Header.Set(h[0], h[1])
	}
}

// ErrorMessage reads error.message of an Anthropic error body (or an
// OpenAI-style or top-level message).
func (p *Provider) ErrorMessage(body []byte) string {
	s := bytesString(body)
	if m := gjson.Get(s, "error.message"); m.Type == gjson.String {
		return m.String()
	}
	if m := gjson.Get(s, "message"); m.Type == gjson.String {
		return m.String()
	}
	return ""
}
