package openai

import (
	"bytes"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/valyala/fasthttp"
)

// StreamUsage says how a server reports usage in streams.
type StreamUsage string

// StreamUsage values.
const (
	// UsageAsk: the server sends a usage chunk when asked with
	// stream_options.include_usage; the gateway asks and hides the chunk
	// from clients that did not ask.
	UsageAsk StreamUsage = "ask"
	// UsageAlways: the server reports usage without being asked (and may
	// reject stream_options).
	UsageAlways StreamUsage = "always"
	// UsageNever: the server reports no usage in streams; the gateway
	// estimates it.
	UsageNever StreamUsage = "never"
)

// AzureKeyHeader is the request header that carries an Azure OpenAI API
// key; other servers take the key as a bearer token.
const AzureKeyHeader = "api-key"

// Options configure one OpenAI-compatible provider.
type Options struct {
	Name string
	// BaseURL is the API root (".../v1"). Empty takes the preset's.
	BaseURL string
	APIKey  string
	// Preset names a known server (see Presets); empty is plain OpenAI
	// semantics with BaseURL required.
	Preset string
	// Azure selects Azure OpenAI: deployment URLs (the target model is the
	// deployment name), api-version and the api-key header.
	Azure      bool
	APIVersion string
	// StreamUsage overrides the preset's.
	StreamUsage StreamUsage
	// MaxTokensField is the field a clamp writes when the request has
	// neither max_tokens nor max_completion_tokens. Default from the preset.
	MaxTokensField string
	// Headers are sent on every request (e.g. OpenRouter's HTTP-Referer).
	Headers map[string]string
}

// Preset is a known OpenAI-compatible server.
type Preset struct {
	BaseURL        string
	StreamUsage    StreamUsage
	MaxTokensField string
}

// Presets are the servers selectable by name. Base URLs of local servers
// are their defaults on localhost; override base_url when they run elsewhere.
var Presets = map[string]Preset{
	"openai":     {"https://api.openai.com/v1", UsageAsk, "max_completion_tokens"},
	"vllm":       {"http://127.0.0.1:8000/v1", UsageAsk, "max_tokens"},
	"ollama":     {"http://127.0.0.1:11434/v1", UsageAsk, "max_tokens"},
	"lmstudio":   {"http://127.0.0.1:1234/v1", UsageAsk, "max_tokens"},
	"llamacpp":   {"http://127.0.0.1:8080/v1", UsageAsk, "max_tokens"},
	"groq":       {"https://api.groq.com/openai/v1", UsageAsk, "max_completion_tokens"},
	"together":   {"https://api.together.xyz/v1", UsageAsk, "max_tokens"},
	"fireworks":  {"https://api.fireworks.ai/inference/v1", UsageAsk, "max_tokens"},
	"deepseek":   {"https://api.deepseek.com/v1", UsageAsk, "max_tokens"},
	"mistral":    {"https://api.mistral.ai/v1", UsageAlways, "max_tokens"},
	"openrouter": {"https://openrouter.ai/api/v1", UsageAsk, "max_tokens"},
	"xai":        {"https://api.x.ai/v1", UsageAsk, "max_completion_tokens"},
	"perplexity": {"https://api.perplexity.ai", UsageAlways, "max_tokens"},
	"cerebras":   {"https://api.cerebras.ai/v1", UsageAsk, "max_completion_tokens"},
}

// Provider is an OpenAI-compatible upstream. Safe for concurrent use.
type Provider struct {
	name        string
	scheme      string
	host        string
	paths       [4][]byte // per providers.Endpoint, base path included
	azure       bool
	azureBase   string // base path + "/openai/deployments/"
	apiVersion  string
	authKey     string // header name
	authValue   []byte // a secret: never logged
	headers     [][2]string
	streamUsage StreamUsage
	maxField    string
	responses   bool   // the server speaks the Responses API
	azureV1     string // Azure's Responses path: base path + "/openai/v1/responses"
}

// New builds a provider from its options.
func New(o Options) (*Provider, error) {
	p := &Provider{name: o.Name, azure: o.Azure, apiVersion: o.APIVersion, streamUsage: UsageAsk, maxField: "max_tokens",
		responses: o.Preset == ""}
	if pr, ok := Presets[o.Preset]; ok {
		if o.BaseURL == "" {
			o.BaseURL = pr.BaseURL
		}
		p.streamUsage, p.maxField = pr.StreamUsage, pr.MaxTokensField
		p.responses = responsesPresets[o.Preset]
	} else if o.Preset != "" {
		return nil, fmt.Errorf("provider %s: unknown preset %q", o.Name, o.Preset)
	}
	if o.StreamUsage != "" {
		p.streamUsage = o.StreamUsage
	}
	if o.MaxTokensField != "" {
		p.maxField = o.MaxTokensField
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider %s: base_url %q is not an http(s) URL", o.Name, o.BaseURL)
	}
	p.scheme, p.host = u.Scheme, u.Host
	base := strings.TrimRight(u.Path, "/")
	for ep := providers.Chat; ep <= providers.Responses; ep++ {
		p.paths[ep] = []byte(base + ep.String())
	}
	if o.Azure {
		if o.APIVersion == "" {
			return nil, fmt.Errorf("provider %s: azure needs api_version", o.Name)
		}
		p.authKey, p.authValue = AzureKeyHeader, []byte(o.APIKey)
		p.azureBase = base + "/openai/deployments/"
		p.azureV1 = base + "/openai/v1/responses"
		p.responses = true
	} else if o.APIKey != "" {
		p.authKey, p.authValue = "Authorization", []byte("Bearer "+o.APIKey)
	}
	for k, v := range o.Headers {
		p.headers = append(p.headers, [2]string{k, v})
	}
	return p, nil
}

// Build writes the upstream request: the client body with the model renamed,
// usage asked for in streams, and max tokens clamped, by byte-level edits.
func (p *Provider) Build(req *fasthttp.Request, c *providers.Call) error {
	req.Header.SetMethod(fasthttp.MethodPost)
	uri := req.URI()
	uri.SetScheme(p.scheme)
	uri.SetHost(p.host)
	switch {
	case p.azure && c.Endpoint == providers.Responses:
		// Azure serves the Responses API only on its v1 surface, which
		// takes the deployment in the body's model and no api-version.
		uri.SetPath(p.azureV1)
	case p.azure:
		// {base}/openai/deployments/{deployment}/{endpoint}?api-version=
		var buf [256]byte
		path := append(buf[:0], p.azureBase...)
		path, err := providers.AppendPathSegment(path, "model", c.Model)
		if err != nil {
			return err
		}
		path = append(path, c.Endpoint.String()...)
		uri.SetPathBytes(path)
		uri.QueryArgs().Set("api-version", p.apiVersion)
	default:
		uri.SetPathBytes(p.paths[c.Endpoint])
	}
	req.Header.SetContentType("application/json")
	if p.authKey != "" {
		req.Header.SetBytesV(p.authKey, p.authValue)
	}
	for _, h := range p.headers {
		req.Header.Set(h[0], h[1])
	}
	if len(c.RequestID) > 0 {
		req.Header.SetBytesV("X-Request-Id", c.RequestID)
	}
	p.writeBody(req, c)
	return nil
}

// edit replaces body[at:at+n] with text.
type edit struct {
	at, n int
	text  []byte
}

var (
	usageTrue      = []byte(`"stream_options":{"include_usage":true},`)
	usageObject    = []byte(`{"include_usage":true}`)
	includeUsageKV = []byte(`"include_usage":true`)
	trueLit        = []byte("true")
)

// writeBody applies the call's edits in body order, appending segments to
// the request body; an unedited body is not copied.
func (p *Provider) writeBody(req *fasthttp.Request, c *providers.Call) {
	var buf [4]edit
	edits := buf[:0]
	if c.ModelJSON != nil {
		edits = append(edits, edit{c.ModelIdx, len(c.ModelRaw), c.ModelJSON})
	}
	// Responses streams always carry usage (in response.completed) and
	// their stream_options mean something else: never edited.
	if c.Stream && !c.IncludeUsage && p.streamUsage == UsageAsk && (c.Endpoint == providers.Chat || c.Endpoint == providers.Completions) {
		edits = append(edits, usageEdit(c))
	}
	if c.ClampMaxTokens > 0 {
		// Only a clamped request pays for the number's buffer (it escapes
		// with the edit).
		edits = p.appendMaxTokensEdits(edits, c, strconv.AppendInt(make([]byte, 0, 20), c.ClampMaxTokens, 10))
	}
	if len(edits) == 0 {
		req.SetBodyRaw(c.Body)
		return
	}
	sortEdits(edits)
	pos := 0
	for _, e := range edits {
		req.AppendBody(c.Body[pos:e.at])
		req.AppendBody(e.text)
		pos = e.at + e.n
	}
	req.AppendBody(c.Body[pos:])
}

// usageEdit asks for the usage chunk: a new stream_options object after the
// body's opening brace, include_usage set inside the client's object, or
// the client's stream_options replaced when it is not an object (null).
// The body keeps one stream_options member either way: an upstream that
// reads the last of repeated keys would otherwise read the client's, send
// no usage, and the request would be billed from an estimate (issue #41).
func usageEdit(c *providers.Call) edit {
	so := c.StreamOptionsRaw
	if so == "" {
		at := bytes.IndexByte(c.Body, '{') + 1
		return edit{at: at, text: usageTrue}
	}
	if so[0] != '{' {
		return edit{at: c.StreamOptionsIdx, n: len(so), text: usageObject}
	}
	if v := c.IncludeUsageAt; c.Scanned && v.Raw != "" {
		return edit{at: v.Idx, n: len(v.Raw), text: trueLit}
	}
	if v := gjson.Get(so, "include_usage"); !c.Scanned && v.Exists() {
		return edit{at: c.StreamOptionsIdx + v.Index, n: len(v.Raw), text: trueLit}
	}
	at := c.StreamOptionsIdx + 1
	text := includeUsageKV
	if strings.TrimSpace(so[1:len(so)-1]) != "" {
		text = append(append([]byte(nil), includeUsageKV...), ',')
	}
	return edit{at: at, text: text}
}

// appendMaxTokensEdits sets the clamped limit n on every output-limit
// field the request has (max_completion_tokens and max_tokens, or
// max_output_tokens on the Responses API), so that whichever one the
// server reads it cannot generate more than the gateway reserved; a
// request with none gets the provider's preferred field.
func (p *Provider) appendMaxTokensEdits(edits []edit, c *providers.Call, n []byte) []edit {
	fields, field := [2]string{"max_completion_tokens", "max_tokens"}, p.maxField
	found := [...]providers.Member{c.MaxCompletionTokensAt, c.MaxTokensAt}
	if c.Endpoint == providers.Responses {
		fields, field = [2]string{"max_output_tokens"}, "max_output_tokens"
		found = [...]providers.Member{c.MaxOutputTokensAt, {}}
	}
	had := len(edits)
	for i, f := range fields {
		v := found[i]
		if !c.Scanned && f != "" {
			r := gjson.Get(bytesString(c.Body), f)
			v = providers.Member{Raw: r.Raw, Idx: r.Index}
		}
		if v.Raw != "" {
			edits = append(edits, edit{at: v.Idx, n: len(v.Raw), text: n})
		}
	}
	if len(edits) > had {
		return edits
	}
	at := bytes.IndexByte(c.Body, '{') + 1
	text := make([]byte, 0, len(field)+len(n)+4)
	text = append(append(append(append(text, '"'), field...), `":`...), n...)
	return append(edits, edit{at: at, text: append(text, ',')})
}

func sortEdits(e []edit) {
	for i := 1; i < len(e); i++ {
		for j := i; j > 0 && e[j].at < e[j-1].at; j-- {
			e[j], e[j-1] = e[j-1], e[j]
		}
	}
}

// Response passes a valid body of the endpoint's shape through and reads
// its usage.
func (p *Provider) Response(_, body []byte, c *providers.Call) ([]byte, providers.Usage, error) {
	a, err := providers.ScanAnswer(body, providers.AnswerMember(c.Endpoint))
	if err != nil {
		return nil, providers.Usage{}, fmt.Errorf("provider %s: %w", p.name, err)
	}
	u := ParseUsage(a.Usage)
	if u.Reported {
		u.Tier = tierOf(a.ServiceTier)
	}
	return body, u, nil
}

// ErrorMessage reads error.message (or a top-level message) of an error body.
func (p *Provider) ErrorMessage(body []byte) string {
	s := bytesString(body)
	if m := gjson.Get(s, "error.message"); m.Type == gjson.String {
		return m.String()
	}
	if m := gjson.Get(s, "message"); m.Type == gjson.String {
		return m.String()
	}
	if m := gjson.Get(s, "error"); m.Type == gjson.String {
		return m.String()
	}
	return ""
}

// ParseUsage reads an OpenAI usage object (chat, completions, embeddings
// and the Responses API's input/output names) from raw, JSON its caller
// has already validated, in one walk over its members. Usage that is
// malformed (no prompt or completion count, or a count that is not a
// non-negative integer) is not reported, so the gateway estimates it
// instead of billing made-up numbers.
func ParseUsage(raw string) providers.Usage {
	if i := rawjson.SkipSpace(raw, 0); i >= len(raw) || raw[i] != '{' {
		return providers.Usage{}
	}
	out := providers.Usage{Reported: true}
	counted := false
	var counts providers.Counts
	rawjson.EachMember(raw, func(k, v string, _ int) bool {
		switch rawjson.KeyName(k) {
		case "prompt_tokens", "input_tokens":
			out.Prompt = counts.Read(v)
			counted = true
		case "completion_tokens", "output_tokens":
			out.Completion = counts.Read(v)
			counted = true
		case "prompt_tokens_details", "input_tokens_details":
			if c := firstMember(v, "cached_tokens"); c != "" && c != "null" {
				out.Cached = counts.Read(c)
			}
		case "completion_tokens_details", "output_tokens_details":
			if r := firstMember(v, "reasoning_tokens"); r != "" && r != "null" {
				out.Reasoning = counts.Read(r)
			}
		}
		return true
	})
	if !counts.OK() || !counted {
		return providers.Usage{}
	}
	return out
}

// firstMember returns the raw value of the first member named name of the
// object obj (keys compared decoded), or "".
func firstMember(obj, name string) string {
	var out string
	rawjson.EachMember(obj, func(k, v string, _ int) bool {
		if rawjson.KeyIs(k, name) {
			out = v
			return false
		}
		return true
	})
	return out
}

// bytesString views b as a string without copying; b must not change while
// the string is in use.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
