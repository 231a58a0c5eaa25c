package gateway

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/owner"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/valyala/fasthttp"
)

// Files and batches belong to the principal that created them (pkg/owner,
// issue #41): the gateway records the owner of each object the
// files_provider creates, answers 404 for another tenant's id exactly as
// for an id that does not exist (files, batches, and file ids in chat and
// Responses content), and lists only the caller's objects.

// owners keeps the owner records; *owner.Store is one.
type owners interface {
	Owner(ctx context.Context, k owner.Kind, id string) (owner.Owner, bool, error)
	Known(k owner.Kind, id string) (owner.Owner, bool)
	Record(ctx context.Context, k owner.Kind, id string, o owner.Owner) error
	Forget(ctx context.Context, k owner.Kind, id string) error
}

// ownerTimeout bounds one read or write of the owner bucket.
const ownerTimeout = 5 * time.Second

// ownStep is what a files or batches endpoint does with owner records.
type ownStep uint8

const (
	// ownCheck: the id in the path must be the caller's.
	ownCheck ownStep = iota
	// ownCreate: the answer's id is recorded as the caller's.
	ownCreate
	// ownList: the answer's list keeps the caller's objects only.
	ownList
	// ownDelete: ownCheck, and the record goes when the provider deleted.
	ownDelete
)

// owns reports whether p is the owner o names.
func owns(o owner.Owner, p *auth.Principal) bool { return o.Is(p.Dept, p.Subject) }

// notFound is the answer for an object the caller does not own or that
// does not exist: the same answer for both, so an id tells nothing.
func notFound(k owner.Kind, param, id string) *apiError {
	what := "File"
	if k == owner.Batch {
		what = "Batch"
	}
	return &apiError{Status: fiber.StatusNotFound, Type: typeInvalidRequest, Code: "not_found", Param: param,
		Message: fmt.Sprintf("No such %s object: %s", what, id)}
}

// ownersDown answers when the owner bucket cannot be read or written.
func ownersDown(err error) *apiError {
	return &apiError{Status: fiber.StatusServiceUnavailable, Type: typeUnavailable, Code: "owners_unavailable", RetryAfter: 1,
		Message: "the gateway cannot read or write the owners of files and batches right now: " + err.Error()}
}

// checkOwner answers 404 unless the object k id is p's.
func (g *Gateway) checkOwner(c *fiber.Ctx, p *auth.Principal, k owner.Kind, param, id string) *apiError {
	ctx, cancel := context.WithTimeout(c.Context(), ownerTimeout)
	defer cancel()
	o, ok, err := g.owners.Owner(ctx, k, id)
	switch {
	case err != nil:
		return ownersDown(err)
	case !ok || !owns(o, p):
		return notFound(k, param, id)
	}
	return nil
}

// batchKeys are the members of a POST /v1/batches body the gateway reads.
var batchKeys = [...]string{"input_file_id", "endpoint"}

// batchRequest is what the gateway reads of a POST /v1/batches body.
type batchRequest struct {
	inputFileID string
	endpoint    string
}

// parseBatch reads a POST /v1/batches body, checked as every JSON body is,
// refusing a repeated member it reads (the provider could read the other).
func parseBatch(body []byte) (batchRequest, *apiError) {
	var br batchRequest
	var f [len(batchKeys)]rawjson.Field
	if err := rawjson.Scan(body, providers.MaxJSONDepth, batchKeys[:], f[:]); err != nil {
		return br, scanError(err)
	}
	for i := range f {
		if f[i].Repeat > 0 {
			return br, errBadRequest("duplicate_key", batchKeys[i], fmt.Sprintf("the key %q appears more than once", batchKeys[i]))
		}
		if !rawjson.IsString(f[i].Raw) || f[i].Raw == `""` {
			return br, errBadRequest(codeMissingField, batchKeys[i], batchKeys[i]+" must be a non-empty string")
		}
	}
	br.inputFileID, br.endpoint = rawjson.Unquote(f[0].Raw), rawjson.Unquote(f[1].Raw)
	return br, nil
}

// relayOwned reads a files or batches answer whole (bounded as the
// provider's answers are), applies the route's owner step to it and sends
// it: a created object's owner is recorded before the creator sees its
// id; a list keeps the caller's objects; a deleted file loses its record.
func (g *Gateway) relayOwned(c *fiber.Ctx, rec *record, pc *passCall, resp *fasthttp.Response) error {
	rt := pc.rt
	defer fasthttp.ReleaseResponse(resp)
	limit := rt.up.hc.MaxResponseBodySize
	if limit <= 0 {
		limit = 64 << 20
	}
	body, err := io.ReadAll(io.LimitReader(resp.BodyStream(), int64(limit)+1))
	_ = resp.CloseBodyStream()
	if err == nil && len(body) > limit {
		err = fasthttp.ErrBodyTooLarge
	}
	if err != nil {
		rec.started = false
		return g.fail(c, rec, rt.up.classify(err))
	}
	p := rec.principal
	ctx, cancel := context.WithTimeout(c.Context(), ownerTimeout)
	defer cancel()
	switch pc.pr.own {
	case ownCreate:
		id := gjson.GetBytes(body, "id")
		if id.Type != gjson.String || id.Str == "" {
			rec.started = false
			return g.fail(c, rec, &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_malformed",
				Message: fmt.Sprintf("provider %s answered %s without an object id", rt.up.name, pc.pr.label)})
		}
		if err := g.owners.Record(ctx, pc.pr.kind, id.Str, owner.Owner{Dept: p.Dept, Subject: p.Subject}); err != nil {
			// The object exists at the provider but belongs to nobody:
			// no tenant can reach it through the gateway.
			g.log.Error("owner not recorded", "request_id", rec.requestID, "kind", pc.pr.kind, "id", id.Str, "err", err)
			rec.started = false
			return g.fail(c, rec, ownersDown(err))
		}
		if rec.billEstimate { // an accepted batch is billed at its estimate (batch.go)
			rec.usage.Prompt, rec.usage.Completion = pc.est.PromptTokens, pc.est.CompletionTokens
		}
	case ownList:
		body = g.ownedList(body, pc.pr.kind, p)
	case ownDelete:
		if err := g.owners.Forget(ctx, pc.pr.kind, c.Params("id")); err != nil {
			g.log.Warn("owner record not removed", "request_id", rec.requestID, "id", c.Params("id"), "err", err)
		}
	}
	c.Response().SetBodyRaw(body)
	g.finish(rec)
	return nil
}

// ownedList rebuilds an OpenAI list answer ({"object":"list","data":[...],
// "first_id","last_id","has_more"}) with the caller's objects only. The
// page may hold fewer objects than asked, none even while has_more is
// true; first_id and last_id name the caller's objects (null without
// any), so no other tenant's id is shown. Owners are read from memory: an
// object created on another gateway a moment ago may be missing from a
// listing, never from a lookup by id.
func (g *Gateway) ownedList(body []byte, k owner.Kind, p *auth.Principal) []byte {
	out := make([]byte, 0, len(body))
	out = append(out, `{"object":"list","data":[`...)
	var first, last string
	n := 0
	gjson.GetBytes(body, "data").ForEach(func(_, v gjson.Result) bool {
		id := v.Get("id").Str
		if o, ok := g.owners.Known(k, id); !ok || !owns(o, p) {
			return true
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, v.Raw...)
		if first == "" {
			first = id
		}
		last = id
		return true
	})
	out = append(out, `],"first_id":`...)
	out = appendIDOrNull(out, first)
	out = append(out, `,"last_id":`...)
	out = appendIDOrNull(out, last)
	out = append(out, `,"has_more":`...)
	if gjson.GetBytes(body, "has_more").Bool() {
		return append(out, "true}"...)
	}
	return append(out, "false}"...)
}

func appendIDOrNull(dst []byte, id string) []byte {
	if id == "" {
		return append(dst, "null"...)
	}
	return append(dst, jsonString(id)...)
}

// fileIDKey is the member that names a file in a chat-family or Messages
// body. The body scan that checks and reads a request (rawjson.ScanFind)
// reports whether any object has it, by its decoded name ("\u0066ile_id"
// is the same key to every parser), so bodies without one are read once.
const fileIDKey = "file_id"

// checkFileRefs answers 404 for a chat, completions, embeddings,
// Responses or Messages body that names a file the caller does not own:
// every "file_id" member, at any depth (input_file and input_image parts
// of the Responses API, file parts of chat content, file sources of
// Messages documents). refs is what the body scan found (fileIDKey); the
// body is read again only when it found one.
func (g *Gateway) checkFileRefs(c *fiber.Ctx, p *auth.Principal, body []byte, refs bool) *apiError {
	if !refs {
		return nil
	}
	var refused *apiError
	var walk func(v gjson.Result) bool
	walk = func(v gjson.Result) bool {
		v.ForEach(func(k, child gjson.Result) bool {
			if k.Type == gjson.String && k.Str == fileIDKey && child.Type == gjson.String {
				if g.owners == nil {
					refused = notFound(owner.File, "file_id", child.Str)
				} else {
					refused = g.checkOwner(c, p, owner.File, "file_id", child.Str)
				}
				if refused != nil {
					return false
				}
			}
			if child.IsObject() || child.IsArray() {
				return walk(child)
			}
			return true
		})
		return refused == nil
	}
	walk(gjson.ParseBytes(body))
	return refused
}
