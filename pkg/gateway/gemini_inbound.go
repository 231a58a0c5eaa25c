package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/gemini"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/valyala/fasthttp"
)

// The Gemini API endpoints (issue #46), as Gemini CLI and Google's SDKs
// call them. Usage events, logs and metrics name them by these paths,
// never by the model in the URL.
const (
	geminiGeneratePath = "/v1beta/models/{model}:generateContent"
	geminiStreamPath   = "/v1beta/models/{model}:streamGenerateContent"
	geminiCountPath    = "/v1beta/models/{model}:countTokens"
	geminiPrefix       = "/v1beta/"
)

// geminiCall is the Gemini endpoints' part of callState.
type geminiCall struct {
	array  bool         // a stream in the JSON array form (no alt=sse)
	native geminiNative // the latest attempt's native provider, or nil
}

// geminiNative is the capability of a provider that speaks the Gemini API
// itself (gemini.Provider): the request goes to it unchanged.
type geminiNative interface {
	BuildNative(req *fasthttp.Request, body []byte, model, method string, clamp int64) error
	NativeStream() providers.Stream
}

// geminiDialect is the Gemini API's, for non-stream answers.
var geminiDialect = dialect{
	nativeUsage: func(body []byte) (providers.Usage, error) {
		if !providers.ValidJSON(body) || !gjson.ParseBytes(body).IsObject() {
			return providers.Usage{}, fmt.Errorf("read gemini answer: %w", providers.ErrMalformed)
		}
		return gemini.UsageOf(body), nil
	},
	fromOpenAI: gemini.ResponseFromOpenAI,
}

// serveGemini handles POST /v1beta/models/{model}:{method}: the Gemini
// API's generateContent, streamGenerateContent (alt=sse, or the JSON
// array form without it) and countTokens. The model is the URL's. A target
// on a gemini provider gets the request natively; any other provider gets
// it translated to the OpenAI format and the answer translated back,
// chunk by chunk. The pipeline is /v1/messages' (authentication, admission,
// routing with fallbacks, relay, usage events); errors are Gemini-shaped.
// There is no response cache here (its key is the body, which does not
// name the model).
func (g *Gateway) serveGemini(c *fiber.Ctx) error {
	model, method, ok := splitGeminiPath(c.Params("*"))
	if !ok || method == gemini.MethodCountTokens {
		if ok {
			return g.serveGeminiCount(c, model)
		}
		setRequestID(c)
		return writeGeminiError(c, &apiError{Status: fiber.StatusNotFound, Type: typeNotFound, Code: "not_found",
			Message: fmt.Sprintf("%s is not served: POST /v1beta/models/{model}:generateContent, :streamGenerateContent or :countTokens", c.Path())})
	}
	stream := method == gemini.MethodStream
	label := geminiGeneratePath
	if stream {
		label = geminiStreamPath
	}
	rec, st := g.begin(c, label, epChat)
	defer release(rec)
	rec.gemini, rec.stream = true, stream
	p, aerr := g.authenticateGemini(c, st)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.principal = p
	body := c.Body()
	if aerr := checkGeminiBody(body); aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.model = model
	plan, aerr := g.resolve(c, st, rec, model)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	cs := &rec.call
	cs.g, cs.m = g, newGeminiRequest(body, model, stream)
	cs.gem = geminiCall{array: stream && string(c.Request().URI().QueryArgs().Peek("alt")) != "sse"}
	m := &cs.m
	if aerr := g.admit(c, st, p, st.priceRoute(plan.Route(), model), &m.admInfo, m.admBody, rec); aerr != nil {
		plan.Release()
		return g.fail(c, rec, aerr)
	}
	rec.body = m.admBody
	return g.attempts(c, st, plan, rec, (*geminiCaller)(cs))
}

// splitGeminiPath splits "{model}:{method}" (the path after
// /v1beta/models/; the model percent-decoded, a "models/" prefix removed,
// copied).
func splitGeminiPath(rest string) (model, method string, ok bool) {
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", "", false
	}
	model, method = rest[:i], rest[i+1:]
	if m, err := url.PathUnescape(model); err == nil {
		model = m
	}
	// The path aliases fiber's buffer, reused after the handler; the model
	// outlives it in the record.
	model = strings.Clone(strings.TrimPrefix(model, "models/"))
	switch method {
	case gemini.MethodGenerate, gemini.MethodStream, gemini.MethodCountTokens:
		return model, method, model != ""
	}
	return "", "", false
}

// geminiWatched are the top-level keys of a Gemini body the gateway acts
// on (the output limit a reservation bounds and a clamp rewrites): each
// may be written once, in one spelling, so that it cannot be read one way
// here and another way upstream.
var geminiWatched = [...]string{"generationConfig", "generation_config"}

// checkGeminiBody checks a body as the OpenAI endpoints do: valid JSON
// nesting at most providers.MaxJSONDepth, UTF-8, an object, the watched
// keys once.
func checkGeminiBody(body []byte) *apiError {
	var f [len(geminiWatched)]rawjson.Field
	if err := rawjson.Scan(body, providers.MaxJSONDepth, geminiWatched[:], f[:]); err != nil {
		var e *rawjson.Error
		if errors.Is(err, rawjson.ErrUTF8) && errors.As(err, &e) {
			return utf8Error(e.Offset)
		}
		if !errors.Is(err, rawjson.ErrNotObject) {
			return errBadRequest(codeInvalidJSON, "", "request body is not valid JSON")
		}
		return errBadRequest(codeInvalidJSON, "", "request body must be a JSON object")
	}
	if f[0].Repeat > 0 || f[1].Repeat > 0 || f[0].Raw != "" && f[1].Raw != "" {
		return errBadRequest("duplicate_key", "generationConfig", "generationConfig appears more than once")
	}
	return nil
}

// newGeminiRequest holds a Gemini request in the two forms its targets
// take: native (gemini providers) and translated to the OpenAI format.
// Admission estimates from the translation when there is one; else from
// the body, with generationConfig.maxOutputTokens as the output bound
// per candidate. A native call's maxOutputTokens is clamped as chat's
// max_tokens is, so that the reservation bounds what it may generate.
func newGeminiRequest(body []byte, model string, stream bool) messagesRequest {
	m := messagesRequest{body: body, model: gjson.Result{Type: gjson.String, Str: model}, admBody: body,
		admInfo: reqInfo{model: model, stream: stream,
			maxTokens: gjson.GetBytes(body, "generationConfig.maxOutputTokens").Int(),
			choices:   max(gjson.GetBytes(body, "generationConfig.candidateCount").Int(), 1)}}
	oa, err := gemini.RequestToOpenAI(nil, body, model, stream)
	m.setTranslation(oa, err)
	return m
}

// geminiCaller calls targets for the Gemini endpoints: natively on gemini
// providers, translated for every other kind. It does not hedge.
type geminiCaller callState

func (gc *geminiCaller) build(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route) *apiError {
	m := &gc.m
	gc.gem.native, _ = rt.up.prov.(geminiNative)
	if gc.gem.native == nil {
		var aerr *apiError
		gc.cur, aerr = gc.g.buildTranslated(c, req, rec, rt, m)
		return aerr
	}
	rec.body = m.body
	gc.cur = providers.Call{Endpoint: epChat, Body: m.body, Model: rt.upstreamModel, Stream: rec.stream}
	method := gemini.MethodGenerate
	if rec.stream {
		method = gemini.MethodStream
	}
	if err := gc.gem.native.BuildNative(req, m.body, rt.upstreamModel, method, rec.adm.clamp); err != nil {
		return buildError(rt.up.name, err)
	}
	return nil
}

func (gc *geminiCaller) call(c *fiber.Ctx, _ *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record, _ tracing.Span) attemptResult {
	g, m := gc.g, &gc.m
	native := gc.gem.native
	if rec.stream {
		var s providers.Stream
		var enc encoder
		if native != nil {
			s, enc = native.NativeStream(), geminiEncoder{gemini.NewPassthrough(gc.gem.array)}
		} else {
			s, enc = rt.up.prov.Stream(&gc.cur), geminiEncoder{gemini.NewEncoder(m.model.Str, rec.requestID, gc.gem.array)}
		}
		res := g.startStream(c, req, rt, rec, &gc.cur, s, enc, a, plan)
		if res.aerr == nil && gc.gem.array {
			// The JSON array form is one JSON document, streamed; the
			// headers go out when the handler returns.
			c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		}
		return res
	}
	res, took := g.tryUnaryDialect(c, req, rt, rec, &gc.cur, native != nil, m.model.Str, &geminiDialect)
	if res.aerr == nil {
		a.Done(router.Outcome{Class: router.Success}, took)
		if rec.attempts > 1 {
			rec.fallbacks = plan.Fallbacks()
		}
		g.finish(rec)
	}
	return res
}

// serveGeminiCount handles POST /v1beta/models/{model}:countTokens as
// /v1/messages/count_tokens is handled: authenticated, resolved, admitted
// (one request against rpm; over budget refused), then passed to a gemini
// provider, else counted with the gateway's tokenizer over the translated
// request (x-tollgate-estimated: true). It costs nothing.
func (g *Gateway) serveGeminiCount(c *fiber.Ctx, model string) error {
	rec, st := g.begin(c, geminiCountPath, epChat)
	defer release(rec)
	rec.gemini, rec.path = true, geminiCountPath
	rec.usage.Reported = true // counting bills no tokens: nothing to estimate
	p, aerr := g.authenticateGemini(c, st)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.principal = p
	body := c.Body()
	if aerr := checkGeminiBody(body); aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.model = model
	plan, aerr := g.resolve(c, st, rec, model)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.adm.priced = true // free, not unpriced
	if aerr := g.admitCost(c, st, p, &rec.adm, 0, func(*admission, int64) int64 { return 0 }); aerr != nil {
		plan.Release()
		return g.fail(c, rec, aerr)
	}
	cs := &rec.call
	cs.g, cs.m = g, messagesRequest{body: body, model: gjson.Result{Type: gjson.String, Str: model}}
	return g.attempts(c, st, plan, rec, (*geminiCountCaller)(cs))
}

// geminiCountCaller calls targets for countTokens: a gemini provider
// counts natively; for any other the gateway counts itself and calls
// nothing.
type geminiCountCaller callState

func (cc *geminiCountCaller) build(_ *fiber.Ctx, req *fasthttp.Request, _ *record, rt *route) *apiError {
	cc.gem.native, _ = rt.up.prov.(geminiNative)
	if cc.gem.native == nil {
		return nil
	}
	if err := cc.gem.native.BuildNative(req, cc.m.body, rt.upstreamModel, gemini.MethodCountTokens, 0); err != nil {
		return buildError(rt.up.name, err)
	}
	return nil
}

func (cc *geminiCountCaller) call(c *fiber.Ctx, _ *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record, _ tracing.Span) attemptResult {
	if cc.gem.native != nil {
		return (*countTokensCaller)(cc).callNative(c, plan, a, req, rt, rec)
	}
	fasthttp.ReleaseRequest(req)
	body := cc.m.body
	if r := gjson.GetBytes(body, "generateContentRequest"); r.IsObject() {
		body = []byte(r.Raw)
	}
	oa, err := gemini.RequestToOpenAI(nil, body, cc.m.model.Str, false)
	if err != nil {
		return attemptResult{aerr: errBadRequest("invalid_request", "", err.Error()), outcome: router.Outcome{Class: router.ClientError}}
	}
	n := 0
	if e := cc.g.acct.Estimator; e != nil {
		n = e.ChatPrompt(oa)
	}
	a.Done(router.Outcome{Class: router.Canceled}, 0) // no call was made
	c.Set("x-tollgate-estimated", "true")
	(*countTokensCaller)(cc).answer(c, rec, fmt.Appendf(nil, `{"totalTokens":%d}`, n))
	return attemptResult{}
}

// authenticateGemini reads the token or API key where Google's clients
// send it: x-goog-api-key, or Authorization: Bearer; from the "key" query
// parameter only when auth.allow_query_key is set (a key in a URL lands in
// proxies' logs). The gateway never logs the query.
func (g *Gateway) authenticateGemini(c *fiber.Ctx, st *state) (*auth.Principal, *apiError) {
	h := &c.Request().Header
	if len(h.Peek(fiber.HeaderAuthorization)) == 0 {
		key := h.Peek(gemini.KeyHeader)
		if q := c.Request().URI().QueryArgs().Peek("key"); len(key) == 0 && len(q) > 0 {
			if !st.cfg.Auth.AllowQueryKey {
				return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "query_key_refused",
					Message: "a key in the \"key\" query parameter is not accepted by this gateway (auth.allow_query_key): send it in the x-goog-api-key header"}
			}
			key = q
		}
		if len(key) > 0 {
			h.Set(fiber.HeaderAuthorization, "Bearer "+string(key))
			if apikey.HasPrefix(key) {
				h.Del(gemini.KeyHeader)
			}
		}
	}
	return g.authenticate(c, st)
}

// writeGeminiError answers e in the Gemini shape
// {"error":{"code","message","status"}}.
func writeGeminiError(c *fiber.Ctx, e *apiError) error {
	c.Status(e.Status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if e.Rate != nil {
		e.Rate.setHeaders(c)
	}
	if e.RetryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, fmt.Sprint(e.RetryAfter))
	}
	return c.Send(gemini.AppendErrorBody(nil, e.Status, e.Message))
}

// handleGeminiModels answers GET /v1beta/models and GET
// /v1beta/models/{model}: the chat models the caller's token allows, in
// the Gemini API's Model shape.
func (g *Gateway) handleGeminiModels(c *fiber.Ctx) error {
	setRequestID(c)
	st := g.state.Load()
	p, aerr := g.authenticateGemini(c, st)
	if aerr != nil {
		return writeGeminiError(c, aerr)
	}
	one := strings.TrimPrefix(c.Params("*"), "models/")
	if m, err := url.PathUnescape(one); err == nil {
		one = m
	}
	b := make([]byte, 0, 256)
	if one == "" {
		b = append(b, `{"models":[`...)
	}
	n := 0
	for i := range st.cfg.Models {
		name := st.cfg.Models[i].Name
		rt := st.routes[name]
		if one != "" && name != one || rt == nil || st.cfg.Models[i].Type != config.ModelTypeChat || !p.AllowsModel(name) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"name":`...)
		b = append(b, jsonString("models/"+name)...)
		b = append(b, `,"baseModelId":`...)
		b = append(b, jsonString(name)...)
		b = append(b, `,"version":"tollgate","displayName":`...)
		b = append(b, jsonString(name)...)
		b = append(b, `,"description":`...)
		b = append(b, jsonString("served by "+rt.up.name)...)
		b = append(b, `,"supportedGenerationMethods":["generateContent","streamGenerateContent","countTokens"]}`...)
	}
	if one == "" {
		b = append(b, "]}"...)
	} else if n == 0 {
		return writeGeminiError(c, &apiError{Status: fiber.StatusNotFound, Type: typeNotFound, Code: codeModelNotFound,
			Message: fmt.Sprintf("models/%s is not found or not allowed to your token", one)})
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}
