package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/valyala/fasthttp"
)

// Batches (POST /v1/batches) run many requests at the provider under the
// gateway's credential, later and out of its sight, so the gateway checks
// them before the provider sees them (issue #41): the input file is the
// caller's (owners.go), and it is read line by line from the
// files_provider. Every line must call the batch's endpoint with one model,
// the same on every line (as the Batch API requires), that the config lets
// run in batches (models[].batch), that the token allows; the lines'
// tokens (the prompt counted, the output at the line's max_tokens, else
// the output reserve, times n) are charged to rate limits (tpm) and
// reserved against budgets like one request, and the batch is billed at
// that estimate once the provider accepted it (usage events mark it
// estimated): the gateway does not read the batch's output.

// maxBatchLines is the most requests one batch file may hold (the Batch
// API's own limit).
const maxBatchLines = 50_000

// batchEndpoints are the endpoints a batch may call, with the kind of
// model each serves.
var batchEndpoints = map[string]endpoint{
	"/v1/chat/completions": epChat,
	"/v1/completions":      epCompletions,
	"/v1/embeddings":       epEmbeddings,
}

// batchLineKeys are the members of an input line the gateway reads, and
// batchBodyKeys those of its body.
var (
	batchLineKeys = [...]string{"custom_id", "method", "url", "body"}
	batchBodyKeys = [...]string{"model", "max_tokens", "max_completion_tokens", "n"}
)

// checkBatch validates a batch before it reaches the provider: its
// endpoint, then every line of its input file; it sets the call's route to
// the batch's model and its estimate (pc.est, pc.tokens) for admission.
func (g *Gateway) checkBatch(c *fiber.Ctx, st *state, rec *record, pc *passCall, br batchRequest) *apiError {
	ep, ok := batchEndpoints[br.endpoint]
	if !ok {
		return errBadRequest(codeUnsupportedEP, "endpoint",
			fmt.Sprintf("a batch may call /v1/chat/completions, /v1/completions or /v1/embeddings, not %q", br.endpoint))
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	up := st.files
	if err := up.pass.build(req, fiber.MethodGet, "/files/:id/content", br.inputFileID, "", nil); err != nil {
		return buildError(up.name, err)
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.StreamBody = true
	deadline := rec.start.Add(up.timeouts.Total)
	if err := up.hc.DoDeadline(req, resp, deadline); err != nil {
		return up.classify(err)
	}
	if tc := connOf(resp); tc != nil {
		_ = tc.SetReadDeadline(deadline) // bounds reading the file as timeouts.total
	}
	defer func() { _ = resp.CloseBodyStream() }()
	if s := resp.StatusCode(); s < 200 || s > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), 64<<10))
		return up.statusError(s, body, nil)
	}
	model, aerr := g.readBatchLines(c, st, rec, pc, resp.BodyStream(), br.endpoint, ep)
	if aerr != nil {
		return aerr
	}
	pc.rt = &route{name: model, up: up, upstreamModel: model, deployment: up.name + "/" + model}
	rec.route, rec.model, rec.billEstimate = pc.rt, model, true
	return nil
}

// readBatchLines reads a batch input file line by line, checks each and
// adds its estimate to pc; it returns the batch's model.
func (g *Gateway) readBatchLines(c *fiber.Ctx, st *state, rec *record, pc *passCall, r io.Reader, url string, ep endpoint) (string, *apiError) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), g.cfg.BodyLimit+1)
	model, n := "", 0
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if n++; n > maxBatchLines {
			return "", batchLineError(n, fmt.Sprintf("a batch holds at most %d requests", maxBatchLines))
		}
		body, m, aerr := batchLine(line, n, url)
		if aerr != nil {
			return "", aerr
		}
		if model == "" {
			if aerr := g.batchModel(c, st, rec, m, ep); aerr != nil {
				return "", aerr
			}
			model = m
		} else if m != model {
			return "", batchLineError(n, fmt.Sprintf("the model %q differs from the batch's %q: a batch runs one model", m, model))
		}
		g.addBatchEstimate(pc, body, ep)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return "", batchLineError(n+1, fmt.Sprintf("the line is longer than the %d-byte body_limit", g.cfg.BodyLimit))
		}
		return "", st.files.classify(err)
	}
	if n == 0 {
		return "", errBadRequest("invalid_batch_file", "input_file_id", "the batch input file holds no request")
	}
	return model, nil
}

// batchLine checks one input line (a JSON object with custom_id, method
// POST, url the batch's endpoint and a body object naming a model) and
// returns its body and model.
func batchLine(line []byte, n int, url string) ([]byte, string, *apiError) {
	var f [len(batchLineKeys)]rawjson.Field
	if err := rawjson.Scan(line, providers.MaxJSONDepth, batchLineKeys[:], f[:]); err != nil {
		return nil, "", batchLineError(n, "not a JSON object: "+err.Error())
	}
	for i := range f {
		if f[i].Repeat > 0 {
			return nil, "", batchLineError(n, fmt.Sprintf("the key %q appears more than once", batchLineKeys[i]))
		}
	}
	switch {
	case !rawjson.IsString(f[0].Raw):
		return nil, "", batchLineError(n, "custom_id must be a string")
	case !rawjson.IsString(f[1].Raw) || rawjson.Unquote(f[1].Raw) != fiber.MethodPost:
		return nil, "", batchLineError(n, `method must be "POST"`)
	case !rawjson.IsString(f[2].Raw) || rawjson.Unquote(f[2].Raw) != url:
		return nil, "", batchLineError(n, fmt.Sprintf("url must be the batch's endpoint %q", url))
	case len(f[3].Raw) == 0 || f[3].Raw[0] != '{':
		return nil, "", batchLineError(n, "body must be an object")
	}
	body := line[f[3].Idx : f[3].Idx+len(f[3].Raw)]
	var bf [len(batchBodyKeys)]rawjson.Field
	if err := rawjson.Scan(body, providers.MaxJSONDepth, batchBodyKeys[:], bf[:]); err != nil {
		return nil, "", batchLineError(n, "body: "+err.Error())
	}
	for i := range bf {
		if bf[i].Repeat > 0 {
			return nil, "", batchLineError(n, fmt.Sprintf("the body key %q appears more than once", batchBodyKeys[i]))
		}
	}
	if !rawjson.IsString(bf[0].Raw) || bf[0].Raw == `""` {
		return nil, "", batchLineError(n, "body.model must be a non-empty string")
	}
	return body, rawjson.Unquote(bf[0].Raw), nil
}

// batchModel checks the batch's model as a request's is checked (unknown
// 404, wrong endpoint 400, not allowed 403, a refusing degradation step
// 429), and that the config lets it run in batches.
func (g *Gateway) batchModel(c *fiber.Ctx, st *state, rec *record, model string, ep endpoint) *apiError {
	// resolve checks the model's type against the lines' endpoint.
	rec.serves = config.ModelTypeChat
	if ep == epEmbeddings {
		rec.serves = config.ModelTypeEmbeddings
	}
	plan, aerr := g.resolve(c, st, rec, model)
	if aerr != nil {
		return aerr
	}
	defer plan.Release()
	if !plan.Route().Config().Batch {
		return &apiError{Status: fiber.StatusForbidden, Type: typePermission, Code: "batch_not_enabled", Param: "model",
			Message: fmt.Sprintf("the model %q may not run in batches on this gateway (models[].batch)", model)}
	}
	return nil
}

// addBatchEstimate adds one line's tokens to the batch's estimate: its
// prompt counted, and for chat and completions its output limit
// (max_completion_tokens, else max_tokens, else the output reserve)
// times n.
func (g *Gateway) addBatchEstimate(pc *passCall, body []byte, ep endpoint) {
	a := &g.acct
	var prompt uint64
	switch {
	case a.Estimator == nil:
		prompt = uint64(len(body) / 4)
	case ep == epChat:
		prompt = uint64(a.Estimator.ChatPrompt(body))
	default:
		prompt = uint64(a.Estimator.Prompt(body))
	}
	pc.est.PromptTokens += prompt
	if ep == epEmbeddings {
		return
	}
	var f [len(batchBodyKeys)]rawjson.Field
	_ = rawjson.Scan(body, providers.MaxJSONDepth, batchBodyKeys[:], f[:]) // checked by batchLine
	out := a.OutputReserve
	for _, raw := range []string{f[2].Raw, f[1].Raw} {
		if v, err := strconv.ParseInt(raw, 10, 64); err == nil && v > 0 {
			out = v
			break
		}
	}
	times := int64(1)
	if v, err := strconv.ParseInt(f[3].Raw, 10, 64); err == nil && v > 1 {
		times = min(v, 128)
	}
	pc.est.CompletionTokens += uint64(out * times)
}

// batchLineError refuses a batch for line n of its input file.
func batchLineError(n int, msg string) *apiError {
	return errBadRequest("invalid_batch_file", "input_file_id", fmt.Sprintf("batch input line %d: %s", n, msg))
}

// batchPrice is the price a batch is billed at: its model's.
func (st *state) batchPrice(pc *passCall) (pricing.Price, bool, *apiError) {
	price, ok := findPrice(st.prices, pc.rt)
	if !ok && st.refuseUnpriced {
		return price, false, errBadRequest("model_not_priced", "model",
			fmt.Sprintf("the model %q has no price, and this gateway refuses unpriced models", pc.rt.name))
	}
	return price, ok, nil
}
