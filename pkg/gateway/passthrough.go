package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/owner"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/registry"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/valyala/fasthttp"
)

// The pass-through endpoints: OpenAI endpoints other than chat,
// completions and embeddings, relayed unchanged to providers that speak
// them (kind openai, azure and mock). The gateway authenticates, checks
// that the model's type serves the endpoint and the model allow-list,
// budgets and rate limits, renames the model when the target calls it
// otherwise, and bills by the price table's unit prices (passPrice).

// Units recorded in usage events (UsageEvent.unit).
const (
	unitImage     = "image"
	unitAudioMs   = "audio_ms"
	unitCharacter = "character"
	unitByte      = "byte"
)

// passMode is how a pass-through endpoint finds its upstream.
type passMode uint8

const (
	// passJSON: a JSON body whose "model" picks the route.
	passJSON passMode = iota
	// passUpload: a multipart/form-data body streamed to the upstream; its
	// "model" field, which must come before any file part, picks the route.
	passUpload
	// passNoModel: files and batches, served by the files_provider.
	passNoModel
)

// passRoute is one pass-through endpoint.
type passRoute struct {
	method string
	path   string // the fiber route, e.g. /v1/files/:id
	label  string // the endpoint in usage events, logs and metrics
	mode   passMode
	serves string // the model type (config.Model.Type) it accepts
	unit   string // what the request is billed by, besides per_request
	// free: without a price entry the request costs nothing and is not
	// "unpriced" (moderations, files, batches).
	free bool
	// upload: the request body is streamed to the upstream, never held.
	upload bool
	// readAll: the answer is read whole to find the audio duration.
	readAll bool
	// kind and own: for files and batches, the kind of object and what
	// the endpoint does with its owner record (owners.go).
	kind owner.Kind
	own  ownStep
}

// passRoutes lists the pass-through endpoints. Methods other than POST
// prefix their label, so "GET /v1/files/{id}" and "DELETE /v1/files/{id}"
// stay apart in usage events.
var passRoutes = []passRoute{
	{method: fiber.MethodPost, path: "/v1/images/generations", mode: passJSON, serves: config.ModelTypeImage, unit: unitImage},
	{method: fiber.MethodPost, path: "/v1/audio/speech", mode: passJSON, serves: config.ModelTypeSpeech, unit: unitCharacter},
	{method: fiber.MethodPost, path: "/v1/moderations", mode: passJSON, serves: config.ModelTypeModeration, free: true},
	{method: fiber.MethodPost, path: "/v1/audio/transcriptions", mode: passUpload, serves: config.ModelTypeTranscription, unit: unitAudioMs, upload: true, readAll: true},
	{method: fiber.MethodPost, path: "/v1/audio/translations", mode: passUpload, serves: config.ModelTypeTranscription, unit: unitAudioMs, upload: true, readAll: true},
	{method: fiber.MethodPost, path: "/v1/files", mode: passNoModel, unit: unitByte, upload: true, free: true, kind: owner.File, own: ownCreate},
	{method: fiber.MethodGet, path: "/v1/files", mode: passNoModel, free: true, kind: owner.File, own: ownList},
	{method: fiber.MethodGet, path: "/v1/files/:id", mode: passNoModel, free: true, kind: owner.File, own: ownCheck},
	{method: fiber.MethodDelete, path: "/v1/files/:id", mode: passNoModel, free: true, kind: owner.File, own: ownDelete},
	{method: fiber.MethodGet, path: "/v1/files/:id/content", mode: passNoModel, free: true, kind: owner.File, own: ownCheck},
	{method: fiber.MethodPost, path: "/v1/batches", mode: passNoModel, free: true, kind: owner.Batch, own: ownCreate},
	{method: fiber.MethodGet, path: "/v1/batches", mode: passNoModel, free: true, kind: owner.Batch, own: ownList},
	{method: fiber.MethodGet, path: "/v1/batches/:id", mode: passNoModel, free: true, kind: owner.Batch, own: ownCheck},
	{method: fiber.MethodPost, path: "/v1/batches/:id/cancel", mode: passNoModel, free: true, kind: owner.Batch, own: ownCheck},
}

// registerPassthrough adds the pass-through endpoints to app.
func (g *Gateway) registerPassthrough(app *fiber.App) {
	for i := range passRoutes {
		pr := &passRoutes[i]
		pr.label = strings.ReplaceAll(pr.path, ":id", "{id}")
		if pr.method != fiber.MethodPost {
			pr.label = pr.method + " " + pr.label
		}
		app.Add(pr.method, pr.path, func(c *fiber.Ctx) error { return g.servePass(c, pr) })
	}
}

// streamsBody reports whether a request's body is streamed to the upstream
// instead of read into memory under body_limit.
func streamsBody(method, path string) bool {
	if method != fiber.MethodPost {
		return false
	}
	switch path {
	case "/v1/audio/transcriptions", "/v1/audio/translations", "/v1/files":
		return true
	}
	return false
}

// limitBody holds every request body but the streamed uploads to
// body_limit. The server streams request bodies (so uploads are never held
// in memory); for every other endpoint this reads the body, up to the
// limit, before the handler runs, and answers 413 beyond it.
func (g *Gateway) limitBody(c *fiber.Ctx) error {
	req := c.Request()
	if !req.IsBodyStream() || streamsBody(c.Method(), c.Path()) {
		return c.Next()
	}
	limit := g.cfg.BodyLimit
	cl := req.Header.ContentLength()
	switch {
	case cl > limit:
		return fiber.ErrRequestEntityTooLarge
	case cl >= 0:
		// Exactly Content-Length bytes: a large body into a pooled buffer
		// (bodybuf.go), a smaller one with fasthttp's Body(). When the
		// client ends the body early, Body() holds its error text instead
		// (always shorter: it reads the first 8 KiB with the headers and
		// answers a short one itself).
		whole := false
		if b, ok := pooledBody(c.Context(), cl); ok {
			if _, err := io.ReadFull(req.BodyStream(), b); err == nil {
				req.SetBodyRaw(b)
				whole = true
			}
		} else {
			whole = len(req.Body()) == cl
		}
		if !whole {
			return fiber.NewError(fiber.StatusBadRequest,
				fmt.Sprintf("read request body: it ended before its Content-Length of %d bytes", cl))
		}
		return c.Next()
	}
	// Chunked: read at most limit+1 bytes.
	buf := bytes.NewBuffer(make([]byte, 0, min(limit+1, 64<<10)))
	if _, err := buf.ReadFrom(io.LimitReader(req.BodyStream(), int64(limit)+1)); err != nil {
		return fiber.NewError(fiber.StatusBadRequest, "read request body: "+err.Error())
	}
	if buf.Len() > limit {
		return fiber.ErrRequestEntityTooLarge
	}
	req.SetBodyRaw(buf.Bytes())
	return c.Next()
}

// passTarget is how to reach a provider's OpenAI endpoints directly; nil
// for kinds that do not speak them.
type passTarget struct {
	scheme, host string
	base         string // the base URL's path, e.g. /v1
	azure        bool
	apiVersion   string
	authKey      string // header name
	authValue    string // a secret: never logged
	headers      [][2]string
}

// newPassTarget describes provider p of kind caps at base URL u for
// pass-through, or returns nil when its kind has no OpenAI endpoints.
func newPassTarget(p config.Provider, caps *registry.Kind, u *url.URL) *passTarget {
	if !caps.PassThrough {
		return nil
	}
	t := &passTarget{scheme: u.Scheme, host: u.Host, base: strings.TrimRight(u.Path, "/"),
		azure: caps.Deployments, apiVersion: p.APIVersion}
	if p.APIKey != "" {
		t.authKey, t.authValue, _ = caps.Key(p.APIKey)
	}
	for k, v := range p.Headers {
		t.headers = append(t.headers, [2]string{k, v})
	}
	return t
}

// build writes the upstream request line and headers: sub is the route's
// path below /v1, in which ":id" stands for id; model is the deployment on
// Azure (empty for endpoints that name no model); query is the client's
// query string. Every client value is placed by providers.AppendPathSegment
// or AppendQueryValue, so none can add a path segment, a parameter or a
// fragment; a value that cannot be placed, or a query parameter the
// gateway sets itself (Azure's api-version), is a *providers.ParamError.
func (t *passTarget) build(req *fasthttp.Request, method, sub, id, model string, query []byte) error {
	var buf [256]byte
	path := append(buf[:0], t.base...)
	var err error
	switch {
	case t.azure && model != "":
		path = append(path, "/openai/deployments/"...)
		if path, err = providers.AppendPathSegment(path, "model", model); err != nil {
			return err
		}
	case t.azure:
		path = append(path, "/openai"...)
	}
	if before, after, ok := strings.Cut(sub, ":id"); ok {
		path = append(path, before...)
		if path, err = providers.AppendPathSegment(path, "id", id); err != nil {
			return err
		}
		sub = after
	}
	path = append(path, sub...)
	q, err := t.appendQuery(nil, query)
	if err != nil {
		return err
	}
	req.Header.SetMethod(method)
	uri := req.URI()
	uri.SetScheme(t.scheme)
	uri.SetHost(t.host)
	uri.SetPathBytes(path)
	uri.SetQueryStringBytes(q)
	if t.authKey != "" {
		req.Header.Set(t.authKey, t.authValue)
	}
	for _, h := range t.headers {
		req.Header.Set(h[0], h[1])
	}
	return nil
}

// appendQuery appends the client's query arguments to dst, each key and
// value escaped again, then the parameters the gateway sets (Azure's
// api-version), which the client may not send.
func (t *passTarget) appendQuery(dst, query []byte) ([]byte, error) {
	if len(query) > 0 {
		args := fasthttp.AcquireArgs()
		defer fasthttp.ReleaseArgs(args)
		args.ParseBytes(query)
		var err error
		args.VisitAll(func(k, v []byte) {
			if err != nil {
				return
			}
			key := unsafeString(k)
			if t.azure && key == "api-version" {
				err = &providers.ParamError{Param: key, Code: providers.CodeInvalidURLValue,
					Message: "the gateway sets api-version from its config; the client may not"}
				return
			}
			if len(dst) > 0 {
				dst = append(dst, '&')
			}
			if dst, err = providers.AppendQueryValue(dst, key, key); err != nil {
				return
			}
			dst = append(dst, '=')
			dst, err = providers.AppendQueryValue(dst, key, unsafeString(v))
		})
		if err != nil {
			return nil, err
		}
	}
	if t.azure {
		if len(dst) > 0 {
			dst = append(dst, '&')
		}
		return providers.AppendQueryValue(append(dst, "api-version="...), "api_version", t.apiVersion)
	}
	return dst, nil
}

// passCall is one pass-through request on its way upstream.
type passCall struct {
	pr     *passRoute
	rt     *route
	a      *router.Attempt // nil for files and batches
	plan   *router.Plan
	body   []byte    // the JSON body, model renamed; nil for uploads and GETs
	upload io.Reader // the streamed body of an upload
	size   int       // the upload's length, -1 when unknown (chunked)
	est    pricing.Usage
	units  uint64          // billed units known before the call (images, characters)
	sent   *countingReader // counts the upload's bytes
	// quality and size of the images asked for ("" when not named), which
	// pick their price (pricing.Price.ImagePrice).
	imgQuality, imgSize string
}

// servePass handles one pass-through request.
func (g *Gateway) servePass(c *fiber.Ctx, pr *passRoute) error {
	rec, st := g.begin(c, pr.label, epChat)
	rec.path = pr.label
	rec.usage.Reported = true // no tokens: nothing to estimate
	p, aerr := g.authenticate(c, st)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.principal = p
	pc := &passCall{pr: pr, size: -1}
	if pr.mode == passNoModel {
		aerr = g.passFiles(c, st, rec, pc)
	} else {
		aerr = g.passModel(c, st, rec, pc)
	}
	if aerr != nil {
		pc.done(router.Outcome{Class: router.Canceled})
		return g.fail(c, rec, aerr)
	}
	price, priced, aerr := st.passPrice(pc)
	if aerr == nil {
		// One request, no tokens; the reservation is the cost of the
		// units known before the call (images, characters; for audio the
		// estimate from the upload's Content-Length, per_request only
		// when it is chunked).
		rec.adm.price, rec.adm.priced = price, priced
		// A batch's tokens count against tpm (images and the like have none).
		aerr = g.admitCost(c, st, p, &rec.adm, int64(pc.est.PromptTokens+pc.est.CompletionTokens),
			func(adm *admission, _ int64) int64 { return adm.price.Cost(pc.est) })
	}
	if aerr != nil {
		pc.done(router.Outcome{Class: router.Canceled})
		return g.fail(c, rec, aerr)
	}
	return g.callPass(c, rec, pc)
}

// done reports the attempt's outcome and releases the plan, once.
func (pc *passCall) done(o router.Outcome) {
	if pc.a != nil {
		pc.a.Done(o, 0)
		pc.a = nil
	}
	if pc.plan != nil {
		pc.plan.Release()
		pc.plan = nil
	}
}

// passFiles routes a files or batches request to the files_provider.
func (g *Gateway) passFiles(c *fiber.Ctx, st *state, rec *record, pc *passCall) *apiError {
	if st.files == nil {
		return errBadRequest("files_not_configured", "",
			fmt.Sprintf("%s is not served: this gateway has no files_provider configured", pc.pr.label))
	}
	if g.owners == nil {
		return &apiError{Status: fiber.StatusServiceUnavailable, Type: typeUnavailable, Code: "owners_unavailable",
			Message: fmt.Sprintf("%s is not served: this gateway keeps no owners of files and batches", pc.pr.label)}
	}
	pc.rt = &route{name: "", up: st.files, deployment: st.files.name}
	rec.route = pc.rt
	rec.attempts, rec.lastTarget = 1, st.files.name
	if id := c.Params("id"); id != "" {
		return g.checkOwner(c, rec.principal, pc.pr.kind, "id", id)
	}
	switch {
	case pc.pr.upload:
		if len(c.Request().Header.MultipartFormBoundary()) == 0 {
			return errBadRequest("invalid_content_type", "", "send the file as multipart/form-data")
		}
		pc.upload, pc.size = requestStream(c)
	case pc.pr.method == fiber.MethodPost:
		// POST /v1/batches: checked as every JSON body is (rawjson.Scan);
		// its input file must be the caller's.
		body := c.Body()
		br, aerr := parseBatch(body)
		if aerr != nil {
			return aerr
		}
		if aerr := g.checkOwner(c, rec.principal, owner.File, "input_file_id", br.inputFileID); aerr != nil {
			return aerr
		}
		if aerr := g.checkBatch(c, st, rec, pc, br); aerr != nil {
			return aerr
		}
		pc.body = body
	}
	return nil
}

// requestStream returns the request body as a reader and its length (-1
// when chunked).
func requestStream(c *fiber.Ctx) (io.Reader, int) {
	req := c.Request()
	if req.IsBodyStream() {
		return req.BodyStream(), req.Header.ContentLength()
	}
	b := req.Body()
	return bytes.NewReader(b), len(b)
}

// passModel reads the model of a JSON or multipart request and picks its
// target.
func (g *Gateway) passModel(c *fiber.Ctx, st *state, rec *record, pc *passCall) *apiError {
	var model, modelRaw string
	var modelIdx int
	var mp multipartHead
	if pc.pr.mode == passJSON {
		info, aerr := parsePassJSON(c.Body(), pc.pr)
		if aerr != nil {
			return aerr
		}
		model, pc.body, pc.est, pc.units = info.model, c.Body(), info.est, info.units
		modelRaw, modelIdx = info.modelRaw, info.modelIdx
		pc.imgQuality, pc.imgSize = info.quality, info.size
	} else {
		var aerr *apiError
		if mp, aerr = readMultipartHead(c); aerr != nil {
			return aerr
		}
		model = mp.model
		// Reserved as if the answer will not say its duration (the
		// upload's length, when the client sent it).
		pc.est.AudioMillis = estimateAudioMillis(int64(mp.size))
	}
	rec.model = strings.Clone(model)
	rec.serves = pc.pr.serves
	plan, aerr := g.resolve(c, st, rec, model)
	if aerr != nil {
		return aerr
	}
	pc.plan = plan
	a := plan.Next()
	if a == nil {
		return &apiError{Status: fiber.StatusServiceUnavailable, Type: typeUnavailable, Code: codeNoTarget,
			Message: fmt.Sprintf("no target can serve %q now: %v", model, plan.Err())}
	}
	pc.a = a
	rt := st.target(g, a, epChat)
	pc.rt, rec.route, rec.routeName = rt, rt, a.Route
	rec.attempts, rec.lastTarget = 1, rt.deployment
	if rt.up.pass == nil {
		return errBadRequest(codeUnsupportedEP, "model",
			fmt.Sprintf("the model %q is served by provider %s (kind %s), which does not support %s", model, rt.up.name, rt.up.kind, pc.pr.label))
	}
	if pc.pr.mode == passJSON {
		if rt.upstreamModel != model {
			pc.body = renameJSONModel(pc.body, modelRaw, modelIdx, rt.upstreamModel)
		}
		return nil
	}
	return pc.streamMultipart(&mp, model)
}

// passJSONInfo is what the gateway reads from a pass-through JSON body.
type passJSONInfo struct {
	model    string
	modelRaw string // the model value as written, quotes included
	modelIdx int    // its byte offset in the body, for renameJSONModel
	units    uint64
	est      pricing.Usage
	quality  string // images: the quality and size asked for, "" when not named
	size     string
}

// passKeys are the top-level keys parsePassJSON reads, in the order of the
// fields rawjson.Scan fills.
var passKeys = [...]string{"model", "n", "input", "quality", "size"}

// parsePassJSON checks a JSON body and reads its model and billing units
// (n images, default 1, and their quality and size, or the characters of
// the speech input) in one
// pass, rawjson.Scan as on the chat endpoints (issue #18): the same
// refusals of bodies that are not JSON, not UTF-8, nested too deep or not
// an object, and of a repeated model, n, input, quality or size, which the gateway and
// the provider could read differently (the gateway routes and bills by
// one). The body is not read again: renameJSONModel edits it at the
// offset found here.
func parsePassJSON(body []byte, pr *passRoute) (passJSONInfo, *apiError) {
	var info passJSONInfo
	if len(bytes.TrimSpace(body)) == 0 {
		return info, errBadRequest(codeInvalidJSON, "", "request body is empty; send a JSON object")
	}
	var f [len(passKeys)]rawjson.Field
	if err := rawjson.Scan(body, providers.MaxJSONDepth, passKeys[:], f[:]); err != nil {
		return info, scanError(err)
	}
	for i := range f {
		if f[i].Repeat > 0 {
			return info, errBadRequest("duplicate_key", passKeys[i], fmt.Sprintf("the key %q appears more than once", passKeys[i]))
		}
	}
	m := &f[0]
	if m.Raw == "" || m.Raw == "null" || m.Raw == `""` {
		return info, errBadRequest(codeMissingField, "model", "you must provide a model parameter")
	}
	if !rawjson.IsString(m.Raw) {
		return info, errBadRequest("invalid_type", "model", "model must be a string")
	}
	info.model, info.modelRaw, info.modelIdx = rawjson.Unquote(m.Raw), m.Raw, m.Idx
	switch pr.unit {
	case unitImage:
		info.units = 1
		if n := f[1].Raw; n != "" && n != "null" {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil || v != math.Trunc(v) || v < 1 || v > 1000 {
				return info, errBadRequest("invalid_type", "n", "n must be a whole number from 1 to 1000")
			}
			info.units = uint64(v)
		}
		info.est.Images = info.units
		for i, dst := range [...]*string{&info.quality, &info.size} {
			raw := f[3+i].Raw
			switch {
			case raw == "" || raw == "null":
			case !rawjson.IsString(raw):
				return info, errBadRequest("invalid_type", passKeys[3+i], passKeys[3+i]+" must be a string")
			default:
				*dst = rawjson.Unquote(raw)
			}
		}
	case unitCharacter:
		if !rawjson.IsString(f[2].Raw) {
			return info, errBadRequest(codeMissingField, "input", "input must be a string")
		}
		info.units = uint64(utf8.RuneCountInString(rawjson.Unquote(f[2].Raw)))
		info.est.Characters = info.units
	}
	return info, nil
}

// renameJSONModel returns a copy of body with its model value, the raw
// value at idx that parsePassJSON found, replaced by model.
func renameJSONModel(body []byte, raw string, idx int, model string) []byte {
	out := make([]byte, 0, len(body)+len(model))
	out = append(out, body[:idx]...)
	out = append(out, jsonString(model)...)
	return append(out, body[idx+len(raw):]...)
}

// passPrice finds the request's price: the served model's entry (else the
// requested route's), or for files and batches the entry named by the
// endpoint ("/v1/files", "/v1/batches"). An image's price is the one of
// the quality and size asked for (pricing.Price.ImagePrice). Free
// endpoints without an entry cost nothing. A model without an entry, or
// whose entry has no price for the endpoint's unit (nor per_request), is
// unpriced, as on chat: billed zero and counted in
// tollgate_unpriced_requests_total, or refused with
// usage.unpriced_model: refuse (issue 41, finding 10).
func (st *state) passPrice(pc *passCall) (pricing.Price, bool, *apiError) {
	var price pricing.Price
	ok := false
	if pc.pr.mode == passNoModel && pc.rt.name != "" {
		return st.batchPrice(pc) // a batch: its model's price
	}
	if pc.pr.mode == passNoModel {
		key := "/v1/files"
		if strings.Contains(pc.pr.path, "/batches") {
			key = "/v1/batches"
		}
		price, ok = st.prices.Lookup(key)
	} else if price, ok = st.prices.Lookup(pc.rt.upstreamModel); !ok {
		price, ok = st.prices.Lookup(pc.rt.name)
	}
	if ok && pc.pr.unit == unitImage {
		price.PerImage, price.PerImageBy = price.ImagePrice(pc.imgQuality, pc.imgSize), nil
	}
	switch {
	case ok && (pc.pr.free || price.PerRequest > 0 || unitPrice(&price, pc.pr.unit) > 0):
		return price, true, nil
	case pc.pr.free:
		return pricing.Price{}, true, nil
	case st.refuseUnpriced:
		return price, false, errBadRequest("model_not_priced", "model",
			fmt.Sprintf("the model %q has no price for %s, and this gateway refuses unpriced models", pc.rt.name, pc.pr.label))
	}
	return price, false, nil
}

// unitPrice is price's price of one unit (nano-USD; per million for
// characters), 0 when it has none.
func unitPrice(price *pricing.Price, unit string) int64 {
	switch unit {
	case unitImage:
		return price.PerImage
	case unitCharacter:
		return price.CharactersPerM
	case unitAudioMs:
		return price.PerAudioSecond
	}
	return 0
}

// callPass makes the upstream call and relays its answer.
func (g *Gateway) callPass(c *fiber.Ctx, rec *record, pc *passCall) error {
	rt := pc.rt
	if !rt.up.hasKey {
		pc.done(router.Outcome{Class: router.Auth})
		return g.fail(c, rec, g.missingKey(rt.up))
	}
	req := fasthttp.AcquireRequest()
	model := ""
	if pc.pr.mode != passNoModel {
		model = rt.upstreamModel
	}
	if err := rt.up.pass.build(req, pc.pr.method, strings.TrimPrefix(pc.pr.path, "/v1"), c.Params("id"), model, c.Request().URI().QueryString()); err != nil {
		fasthttp.ReleaseRequest(req)
		pc.done(router.Outcome{Class: router.ClientError})
		return g.fail(c, rec, buildError(rt.up.name, err))
	}
	if pc.a != nil && pc.a.Key != "" {
		rt.up.setKey(req, pc.a.Key)
	}
	req.Header.SetBytesV("X-Request-Id", c.Response().Header.Peek(headerRequestID))
	if ct := c.Request().Header.ContentType(); len(ct) > 0 && pc.pr.method == fiber.MethodPost {
		req.Header.SetContentTypeBytes(ct)
	}
	switch {
	case pc.upload != nil:
		pc.sent = &countingReader{r: pc.upload}
		req.SetBodyStream(pc.sent, pc.size)
	case pc.body != nil:
		req.SetBodyRaw(pc.body)
	}
	g.tracer.Inject(rec.traceCtx, &req.Header)
	c.Set("x-tollgate-provider", rt.up.name)
	if model != "" {
		c.Set("x-tollgate-model", model)
	}
	c.Set("x-tollgate-attempts", "1")
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	g.beginUpstream(rec, rt)
	upStart := time.Now()
	deadline := rec.start.Add(rt.up.timeouts.Total)
	err := rt.up.hc.DoDeadline(req, resp, deadline)
	fasthttp.ReleaseRequest(req)
	rec.upstream = time.Since(upStart)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if errors.Is(err, errDuplicateModel) || errors.Is(err, errUnreadablePart) {
			// The upload's form was refused as it streamed (modelGuard):
			// the provider received a cut request.
			pc.done(router.Outcome{Class: router.ClientError})
			return g.fail(c, rec, guardError(err))
		}
		pc.done(router.Classify(0, err, nil, true))
		return g.fail(c, rec, rt.up.classify(err))
	}
	if tc := connOf(resp); tc != nil {
		_ = tc.SetReadDeadline(deadline) // bounds the body as timeouts.total
	}
	if st := resp.StatusCode(); st < 200 || st > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), 64<<10))
		ra := append([]byte(nil), resp.Header.Peek(fiber.HeaderRetryAfter)...)
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		o := router.Classify(st, nil, body, true)
		o.RetryAfter = router.ParseRetryAfter(ra, time.Now())
		pc.done(o)
		return g.fail(c, rec, rt.up.statusError(st, body, ra))
	}
	pc.done(router.Outcome{Class: router.Success})
	// Units are billed only for an answer: a failed call costs nothing.
	switch {
	case pc.units > 0:
		rec.units, rec.unit = pc.units, pc.pr.unit
	case pc.sent != nil && pc.pr.unit == unitByte:
		rec.units, rec.unit = pc.sent.n, unitByte
	}
	rec.status = resp.StatusCode()
	rec.started = true
	c.Status(rec.status)
	for _, h := range []string{fiber.HeaderContentType, fiber.HeaderContentDisposition} {
		if v := resp.Header.Peek(h); len(v) > 0 {
			c.Response().Header.SetBytesV(h, v)
		}
	}
	if pc.pr.readAll {
		return g.relayWhole(c, rec, rt, resp, pc.sent)
	}
	if pc.pr.mode == passNoModel && pc.pr.own != ownCheck {
		return g.relayOwned(c, rec, pc, resp)
	}
	rec.held = true
	c.Context().SetBodyStream(&passBody{g: g, rec: rec, resp: resp}, resp.Header.ContentLength())
	return nil
}

// relayWhole reads a small answer (a transcription) whole, bills the audio
// duration it reports, else the duration estimated from the upload's size
// (estimateAudioMillis), and sends it.
func (g *Gateway) relayWhole(c *fiber.Ctx, rec *record, rt *route, resp *fasthttp.Response, sent *countingReader) error {
	defer fasthttp.ReleaseResponse(resp)
	body, err := io.ReadAll(io.LimitReader(resp.BodyStream(), int64(rt.up.hc.MaxResponseBodySize)+1))
	_ = resp.CloseBodyStream()
	if err == nil && rt.up.hc.MaxResponseBodySize > 0 && len(body) > rt.up.hc.MaxResponseBodySize {
		err = fasthttp.ErrBodyTooLarge
	}
	if err != nil {
		rec.started = false
		return g.fail(c, rec, rt.up.classify(err))
	}
	if ms, ok := audioMillis(body); ok {
		rec.units, rec.unit = ms, unitAudioMs
	} else if sent != nil {
		// No duration in the answer (text, srt, vtt, or json without
		// usage.seconds): what the client chose must not make the audio
		// free (issue 41, finding 10). The event is marked estimated.
		rec.units, rec.unit = estimateAudioMillis(int64(sent.n)), unitAudioMs
		rec.usage.Reported = false
	}
	c.Response().SetBodyRaw(body)
	g.finish(rec)
	return nil
}

// estimateBytesPerSecond is the bit rate at which the gateway takes an
// upload to be audio when the answer does not say its duration: 2,000
// bytes (16 kbit/s) a second. Most recordings are encoded at this rate or
// above (WAV at 16 kHz is 32,000 bytes a second, a voice MP3 4,000 to
// 16,000), so the estimate is usually above the real length; audio
// compressed below it (low-rate Opus voice notes) is billed short. A
// client that wants its exact duration billed asks for json or
// verbose_json (docs/endpoints.md: Pass-through endpoints).
const estimateBytesPerSecond = 2000

// estimateAudioMillis is the duration, in milliseconds, that an upload of
// n bytes (the whole form) is billed as when its answer says none; 0 for
// a length that is not known (-1).
func estimateAudioMillis(n int64) uint64 {
	if n <= 0 {
		return 0
	}
	return uint64(n) * 1000 / estimateBytesPerSecond
}

// audioMillis reads the audio duration of a transcription or translation
// answer: "duration" (verbose_json) or usage.seconds (type "duration"), in
// seconds, rounded to milliseconds. Text formats carry none.
func audioMillis(body []byte) (uint64, bool) {
	if !gjson.ValidBytes(body) {
		return 0, false
	}
	d := gjson.GetBytes(body, "duration")
	if d.Type != gjson.Number {
		if d = gjson.GetBytes(body, "usage.seconds"); d.Type != gjson.Number {
			return 0, false
		}
	}
	if d.Num < 0 || d.Num > 1e9 {
		return 0, false
	}
	return uint64(math.Round(d.Num * 1000)), true
}

// passBody streams an upstream answer to the client without holding it,
// and finishes the request when the body ends: at EOF, or when the client
// went away (Close before EOF: recorded as 499, billed as served).
type passBody struct {
	g      *Gateway
	rec    *record
	resp   *fasthttp.Response
	eof    bool
	closed bool
}

// Read implements io.Reader.
func (b *passBody) Read(p []byte) (int, error) {
	n, err := b.resp.BodyStream().Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		b.rec.errType = "upstream_stream_cut"
	}
	return n, err
}

// Close implements io.Closer: fasthttp calls it once the response is
// written or the write failed.
func (b *passBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	_ = b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	if !b.eof && b.rec.errType == "" {
		b.rec.status, b.rec.clientAborted = statusClientClosed, true
	}
	b.g.finish(b.rec)
	return nil
}

// statusClientClosed records a request whose client left before the end.
const statusClientClosed = 499

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n uint64
}

// Read implements io.Reader.
func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += uint64(n)
	return n, err
}

// unitUsage adds the request's units to u, for pricing.
func unitUsage(u *pricing.Usage, rec *record) {
	switch rec.unit {
	case unitImage:
		u.Images = rec.units
	case unitAudioMs:
		u.AudioMillis = rec.units
	case unitCharacter:
		u.Characters = rec.units
	}
}

// passMetrics returns the metrics of a pass-through request, labelled with
// its endpoint.
func (g *Gateway) passMetrics(rec *record) *metrics.Route {
	model, provider := "", ""
	if rec.route != nil {
		model, provider = rec.route.name, rec.route.up.name
	}
	return g.metrics.Route(model, provider, rec.path)
}
