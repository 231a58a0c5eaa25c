package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
)

// keyStore is what the /admin/keys endpoints call; *apikey.Store is one.
type keyStore interface {
	Create(ctx context.Context, spec apikey.Key) (string, apikey.Key, error)
	Rotate(ctx context.Context, id string) (string, apikey.Key, error)
	Revoke(ctx context.Context, id string) (apikey.Key, error)
	List(ctx context.Context) ([]apikey.Key, error)
}

// keySpec is the body of POST /admin/keys: the principal of the new key.
type keySpec struct {
	Name      string             `json:"name"`
	Subject   string             `json:"sub"`
	Dept      string             `json:"dept"`
	Team      string             `json:"team"`
	Project   string             `json:"project"`
	Models    []string           `json:"models"`
	Budgets   []auth.BudgetClaim `json:"budgets"`
	RPM       int64              `json:"rpm"`
	TPM       int64              `json:"tpm"`
	Priority  string             `json:"priority"`
	ExpiresAt time.Time          `json:"expires_at"`
}

// newKey is the answer to a create or rotate: the Key and, this once, its
// token.
type newKey struct {
	apikey.Key
	Token string `json:"key"`
}

// maxKeySpec bounds the body of POST /admin/keys.
const maxKeySpec = 64 << 10

// keys serves GET /admin/keys (list) and POST /admin/keys (create).
func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	if s.o.Keys == nil {
		writeError(w, http.StatusNotFound, "not_configured", "API keys are not available")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		list, err := s.o.Keys.List(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "store_failed", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, list)
	case http.MethodPost:
		var spec keySpec
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxKeySpec))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "body: "+err.Error())
			return
		}
		by := s.actor(r)
		tok, k, err := s.o.Keys.Create(s.actorContext(r, by), apikey.Key{Name: spec.Name, Subject: spec.Subject,
			Dept: spec.Dept, Team: spec.Team, Project: spec.Project, Models: spec.Models, Budgets: spec.Budgets,
			RPM: spec.RPM, TPM: spec.TPM, Priority: spec.Priority, ExpiresAt: spec.ExpiresAt, CreatedBy: by})
		if err != nil && !errors.Is(err, audit.ErrNotRecorded) {
			s.keyError(w, err)
			return
		}
		s.log.Info("api key created", "id", k.ID, "sub", k.Subject, "dept", k.Dept, "by", by)
		writeJSON(w, http.StatusCreated, s.keyAnswer(newKey{Key: k, Token: tok}, err, by))
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
	}
}

// key serves DELETE /admin/keys/{id} (revoke).
func (s *Server) key(w http.ResponseWriter, r *http.Request) {
	if s.o.Keys == nil {
		writeError(w, http.StatusNotFound, "not_configured", "API keys are not available")
		return
	}
	if r.Method != http.MethodDelete {
		w.Header().Set("Allow", "DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use DELETE to revoke a key")
		return
	}
	by := s.actor(r)
	k, err := s.o.Keys.Revoke(s.actorContext(r, by), r.PathValue("id"))
	if err != nil && !errors.Is(err, audit.ErrNotRecorded) {
		s.keyError(w, err)
		return
	}
	s.log.Info("api key revoked", "id", k.ID, "by", by)
	writeJSON(w, http.StatusOK, s.keyAnswer(k, err, by))
}

// rotateKey serves POST /admin/keys/{id}/rotate.
func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request) {
	if s.o.Keys == nil {
		writeError(w, http.StatusNotFound, "not_configured", "API keys are not available")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST to rotate a key")
		return
	}
	by := s.actor(r)
	tok, k, err := s.o.Keys.Rotate(s.actorContext(r, by), r.PathValue("id"))
	if err != nil && !errors.Is(err, audit.ErrNotRecorded) {
		s.keyError(w, err)
		return
	}
	s.log.Info("api key rotated", "id", k.ID, "by", by)
	writeJSON(w, http.StatusOK, s.keyAnswer(newKey{Key: k, Token: tok}, err, by))
}

// keyError answers a key store error: 400 for a bad spec, 404 for an
// unknown id, 409 for a revoked key, 503 when the store failed.
func (s *Server) keyError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, apikey.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid_key", err.Error())
	case errors.Is(err, apikey.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, apikey.ErrRevoked):
		writeError(w, http.StatusConflict, "key_revoked", err.Error())
	default:
		s.log.Warn("api key store", "error", err)
		writeError(w, http.StatusServiceUnavailable, "store_failed", err.Error())
	}
}

// actorContext is the context of a change made by an admin request: it
// outlives the request (the change is finished even if the client goes)
// and names by as the audit event's actor.
func (s *Server) actorContext(r *http.Request, by string) context.Context {
	return audit.WithActor(context.WithoutCancel(r.Context()), by)
}

// keyAnswer is v, or, when the change's audit event was lost, v with an
// audit_error beside it (the change is made; the loss is logged).
func (s *Server) keyAnswer(v any, err error, by string) any {
	if err == nil {
		return v
	}
	s.log.Warn("api key change not audited", "by", by, "error", err)
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["audit_error"] = err.Error()
	return m
}
