package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
)

// keysData is the data of the keys page.
type keysData struct {
	Keys []keyRow
	// Dept is the department filter ("" for all); Depts are the ones a
	// global role may filter by.
	Dept  string
	Depts []string
	// FixedDept is the user's own department when the role may create
	// keys in it only.
	FixedDept string
	CanManage bool
	// NewKey is the key just created or rotated, with its secret, shown
	// this once.
	NewKey    *apikey.Key
	NewSecret string
	Error     string
	Missing   bool // no key store
	// LastUsedNote says why a key has no last use: not used in the last
	// LastUsedDays days, or the history cannot be read.
	LastUsedNote string
}

// keyRow is one key of the list.
type keyRow struct {
	apikey.Key
	Status    string // active, revoked, expired
	CanManage bool
	LastUsed  string // the last day the key was used ('YYYY-MM-DD'), or ""
}

// keysPage serves GET /ui/keys (?dept= filters, for global roles).
func (c *Console) keysPage(w http.ResponseWriter, r *http.Request) {
	c.renderKeys(w, r, http.StatusOK, keysData{Dept: r.URL.Query().Get("dept")})
}

// renderKeys lists the keys the user may see into d and renders it.
func (c *Console) renderKeys(w http.ResponseWriter, r *http.Request, status int, d keysData) {
	u, _ := UserFrom(r.Context())
	if d.Dept == "" && !access.Global(u.Role) {
		d.Dept = u.Dept
	}
	if !access.Global(u.Role) {
		d.FixedDept = u.Dept
	}
	if d.Dept != "" && !c.Allowed(r, access.KeysView, d.Dept) {
		c.forbid(w, r)
		return
	}
	d.CanManage = access.Sees(u.Role, access.KeysManage, u.Dept)
	if c.o.Keys == nil {
		d.Missing = true
		c.render(w, r, status, "keys", "Keys", d)
		return
	}
	list, err := c.o.Keys.List(r.Context())
	if err != nil {
		c.log.Warn("console key list", "error", err)
		d.Error = "The key store cannot be read right now: " + err.Error()
		c.render(w, r, http.StatusServiceUnavailable, "keys", "Keys", d)
		return
	}
	now := c.o.Now()
	lastUsed := c.keysLastUsed(r.Context(), &d)
	depts := map[string]bool{}
	for _, k := range list {
		depts[k.Dept] = true
		if (d.Dept != "" && k.Dept != d.Dept) || !c.Allowed(r, access.KeysView, k.Dept) {
			continue
		}
		row := keyRow{Key: k, Status: "active", CanManage: c.Allowed(r, access.KeysManage, k.Dept), LastUsed: lastUsed[k.ID]}
		switch {
		case !k.RevokedAt.IsZero():
			row.Status, row.CanManage = "revoked", false
		case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
			row.Status = "expired"
		}
		d.Keys = append(d.Keys, row)
	}
	if access.Global(u.Role) {
		for dept := range depts {
			d.Depts = append(d.Depts, dept)
		}
		slices.Sort(d.Depts)
	}
	c.render(w, r, status, "keys", "Keys", d)
}

// keysLastUsed reads the keys' last days of use from ClickHouse, and sets
// d.LastUsedNote to what a key without one shows.
func (c *Console) keysLastUsed(ctx context.Context, d *keysData) map[string]string {
	data := c.o.Pages.Data
	if data == nil {
		d.LastUsedNote = "unknown: " + ErrNoClickHouse.Error()
		return nil
	}
	last, err := data.KeysLastUsed(ctx)
	if err != nil {
		c.log.Warn("console keys last used", "error", err)
		d.LastUsedNote = "unknown: the usage history cannot be read"
		return nil
	}
	d.LastUsedNote = fmt.Sprintf("not in the last %d days", LastUsedDays)
	return last
}

// maxField bounds a text field of the key form.
const maxField = 128

// formField returns the trimmed form value of name, or ok false when it
// is too long or holds a control character.
func formField(r *http.Request, name string) (string, bool) {
	v := strings.TrimSpace(r.PostForm.Get(name))
	if len(v) > maxField {
		return "", false
	}
	for _, ch := range v {
		if ch < 0x20 || ch == 0x7f {
			return "", false
		}
	}
	return v, true
}

// parseExpiry reads the expires_at field: empty (never), a date (the
// end of that day, UTC), a datetime-local value (UTC) or RFC 3339.
func parseExpiry(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t.Add(24*time.Hour - time.Second), nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("expires_at: give a date (2027-01-31) or a date and time")
}

// actorCtx is the ctx of a change made by the console user of r: the
// user's subject is its audit actor, and it outlives the request.
func actorCtx(r *http.Request) context.Context {
	u, _ := UserFrom(r.Context())
	return audit.WithActor(context.WithoutCancel(r.Context()), u.Subject)
}

// createKey serves POST /ui/keys: fields name, dept, team, sub,
// expires_at. The answer shows the secret once, in #new-key-secret.
func (c *Console) createKey(w http.ResponseWriter, r *http.Request) {
	if c.o.Keys == nil {
		c.renderKeys(w, r, http.StatusNotFound, keysData{})
		return
	}
	var spec apikey.Key
	var ok [5]bool
	var expires string
	spec.Name, ok[0] = formField(r, "name")
	spec.Dept, ok[1] = formField(r, "dept")
	spec.Team, ok[2] = formField(r, "team")
	spec.Subject, ok[3] = formField(r, "sub")
	expires, ok[4] = formField(r, "expires_at")
	if slices.Contains(ok[:], false) {
		c.renderKeys(w, r, http.StatusBadRequest, keysData{Error: "Each field holds at most 128 characters and no control characters."})
		return
	}
	u, _ := UserFrom(r.Context())
	if spec.Dept == "" && !access.Global(u.Role) {
		spec.Dept = u.Dept
	}
	if spec.Dept == "" || spec.Subject == "" {
		c.renderKeys(w, r, http.StatusBadRequest, keysData{Error: "A key needs a subject (sub) and a department (dept)."})
		return
	}
	if !c.Allowed(r, access.KeysManage, spec.Dept) {
		c.forbid(w, r)
		return
	}
	exp, err := parseExpiry(expires)
	if err == nil && !exp.IsZero() && !exp.After(c.o.Now()) {
		err = errors.New("expires_at is in the past")
	}
	if err != nil {
		c.renderKeys(w, r, http.StatusBadRequest, keysData{Error: err.Error()})
		return
	}
	spec.ExpiresAt, spec.CreatedBy = exp, u.Subject
	tok, k, err := c.o.Keys.Create(actorCtx(r), spec)
	if err != nil && !errors.Is(err, audit.ErrNotRecorded) {
		c.keyError(w, r, err)
		return
	}
	c.auditLost(err, u.Subject)
	c.log.Info("api key created", "id", k.ID, "sub", k.Subject, "dept", k.Dept, "by", u.Subject)
	c.renderKeys(w, r, http.StatusOK, keysData{NewKey: &k, NewSecret: tok})
}

// findKey returns the key id of the store, for its department.
func (c *Console) findKey(ctx context.Context, id string) (apikey.Key, error) {
	if !apikey.ValidID(id) {
		return apikey.Key{}, apikey.ErrNotFound
	}
	list, err := c.o.Keys.List(ctx)
	if err != nil {
		return apikey.Key{}, err
	}
	for _, k := range list {
		if k.ID == id {
			return k, nil
		}
	}
	return apikey.Key{}, apikey.ErrNotFound
}

// keyChange runs a rotate or revoke of the key in the path after
// checking that the user may manage keys of its department.
func (c *Console) keyChange(w http.ResponseWriter, r *http.Request, change func(ctx context.Context, id string) (string, apikey.Key, error), what string) {
	if c.o.Keys == nil {
		c.renderKeys(w, r, http.StatusNotFound, keysData{})
		return
	}
	k, err := c.findKey(r.Context(), r.PathValue("id"))
	if err != nil {
		c.keyError(w, r, err)
		return
	}
	if !c.Allowed(r, access.KeysManage, k.Dept) {
		c.forbid(w, r)
		return
	}
	u, _ := UserFrom(r.Context())
	tok, k, err := change(actorCtx(r), k.ID)
	if err != nil && !errors.Is(err, audit.ErrNotRecorded) {
		c.keyError(w, r, err)
		return
	}
	c.auditLost(err, u.Subject)
	c.log.Info("api key "+what, "id", k.ID, "by", u.Subject)
	if tok == "" {
		http.Redirect(w, r, Prefix+"keys", http.StatusSeeOther)
		return
	}
	c.renderKeys(w, r, http.StatusOK, keysData{NewKey: &k, NewSecret: tok})
}

// rotateKey serves POST /ui/keys/{id}/rotate.
func (c *Console) rotateKey(w http.ResponseWriter, r *http.Request) {
	c.keyChange(w, r, func(ctx context.Context, id string) (string, apikey.Key, error) {
		return c.o.Keys.Rotate(ctx, id)
	}, "rotated")
}

// revokeKey serves POST /ui/keys/{id}/revoke.
func (c *Console) revokeKey(w http.ResponseWriter, r *http.Request) {
	c.keyChange(w, r, func(ctx context.Context, id string) (string, apikey.Key, error) {
		k, err := c.o.Keys.Revoke(ctx, id)
		return "", k, err
	}, "revoked")
}

// keyError answers a key store error on the keys page.
func (c *Console) keyError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, apikey.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, apikey.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, apikey.ErrRevoked):
		status = http.StatusConflict
	default:
		c.log.Warn("console key store", "error", err)
	}
	c.renderKeys(w, r, status, keysData{Error: err.Error()})
}

// auditLost logs a change made whose audit event was not stored.
func (c *Console) auditLost(err error, by string) {
	if err != nil {
		c.log.Warn("api key change not audited", "by", by, "error", err)
	}
}
