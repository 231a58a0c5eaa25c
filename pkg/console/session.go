package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/config"
)

// SessionCookie is the cookie holding a console session's id.
const SessionCookie = "tollgate_console"

// SessionBucket is the NATS KV bucket of console sessions. A session is
// stored under the SHA-256 of its id, so reading the bucket does not give
// anyone a usable cookie.
const SessionBucket = "tollgate_console_sessions"

// maxMemSessions bounds the in-memory store (sessions and sign-ins in
// progress); beyond it expired entries are dropped, and if none has
// expired a new sign-in is refused.
const maxMemSessions = 10000

// session is one signed-in browser.
type session struct {
	User User `json:"user"`
	// CSRF is the token every POST of this session must carry.
	CSRF    string    `json:"csrf"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// sessionKV is the part of jetstream.KeyValue the session store uses.
type sessionKV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// kvMaker creates a KV bucket; jetstream.JetStream is one.
type kvMaker interface {
	CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error)
}

// EnsureSessions creates or opens the session bucket. Its entries expire
// after ttl (console.session_ttl), so an abandoned session leaves nothing
// behind; a session also carries its own expiry, checked on every request.
func EnsureSessions(ctx context.Context, js kvMaker, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SessionBucket,
		Description: "console sessions, by the SHA-256 of their id", TTL: ttl, Replicas: replicas,
		Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("create kv bucket %s: %w", SessionBucket, err)
	}
	return kv, nil
}

// sessions keeps sessions and sign-ins in progress in the KV bucket, or
// in memory without one.
type sessions struct {
	kv  sessionKV // nil: mem
	now func() time.Time

	mu  sync.Mutex // guards mem
	mem map[string]memEntry
}

type memEntry struct {
	b   []byte
	exp time.Time
}

func newSessions(kv sessionKV, now func() time.Time) *sessions {
	return &sessions{kv: kv, now: now, mem: map[string]memEntry{}}
}

// randomID returns 32 random bytes, base64url.
func randomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// storeKey is the key of id's record under prefix: the hash of the id.
func storeKey(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])
}

// put stores v under key until exp.
func (s *sessions) put(ctx context.Context, key string, v any, exp time.Time) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode session: %w", err)
	}
	if s.kv != nil {
		if _, err := s.kv.Put(ctx, key, b); err != nil {
			return fmt.Errorf("store session: %w", err)
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.mem) >= maxMemSessions {
		now := s.now()
		for k, e := range s.mem {
			if now.After(e.exp) {
				delete(s.mem, k)
			}
		}
		if len(s.mem) >= maxMemSessions {
			return errors.New("store session: too many sessions in memory")
		}
	}
	s.mem[key] = memEntry{b: b, exp: exp}
	return nil
}

// load reads key into v; found is false when it is absent. With take, the
// entry is deleted as it is read, once: of two concurrent takes, one
// finds it.
func (s *sessions) load(ctx context.Context, key string, v any, take bool) (found bool, err error) {
	var b []byte
	if s.kv != nil {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("read session: %w", err)
		}
		if take {
			err := s.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
			if err != nil {
				return false, nil // taken by another request, or gone
			}
		}
		b = e.Value()
	} else {
		s.mu.Lock()
		e, ok := s.mem[key]
		if ok && take {
			delete(s.mem, key)
		}
		s.mu.Unlock()
		if !ok {
			return false, nil
		}
		b = e.b
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("decode session: %w", err)
	}
	return true, nil
}

func (s *sessions) del(ctx context.Context, key string) error {
	if s.kv != nil {
		if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete session: %w", err)
		}
		return nil
	}
	s.mu.Lock()
	delete(s.mem, key)
	s.mu.Unlock()
	return nil
}

// create starts a session for u lasting ttl and returns its id, the
// cookie's value.
func (s *sessions) create(ctx context.Context, u User, ttl time.Duration) (string, *session, error) {
	id, err := randomID()
	if err != nil {
		return "", nil, err
	}
	csrf, err := randomID()
	if err != nil {
		return "", nil, err
	}
	now := s.now().UTC()
	ss := &session{User: u, CSRF: csrf, Created: now, Expires: now.Add(ttl)}
	if err := s.put(ctx, storeKey("s.", id), ss, ss.Expires); err != nil {
		return "", nil, err
	}
	return id, ss, nil
}

// get returns the session of r's cookie, or nil when there is none or it
// has expired.
func (s *sessions) get(ctx context.Context, r *http.Request) (*session, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 64 {
		return nil, nil
	}
	var ss session
	found, err := s.load(ctx, storeKey("s.", ck.Value), &ss, false)
	if err != nil || !found {
		return nil, err
	}
	if !s.now().Before(ss.Expires) {
		return nil, nil
	}
	return &ss, nil
}

// end deletes the session of r's cookie.
func (s *sessions) end(ctx context.Context, r *http.Request) error {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 64 {
		return nil
	}
	return s.del(ctx, storeKey("s.", ck.Value))
}

// setCookie sets the session cookie: HttpOnly, SameSite=Lax (the
// provider's redirect back is a top-level GET, which Lax lets through),
// scoped to the console, Secure when the browser reaches the console
// over TLS.
func setCookie(w http.ResponseWriter, name, value string, maxAge int, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
}

// secureCookies reports whether the browser reaches the console over
// TLS: the request came over TLS, or the configured redirect URL is
// https (a TLS-terminating proxy in front of the admin listener).
func (c *Console) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(c.o.Config().Console.OIDC.RedirectURL, "https://")
}

// signIn starts a session for u, records it, and sends the browser to
// the overview; how says which way u signed in ("oidc", "link").
func (c *Console) signIn(w http.ResponseWriter, r *http.Request, u User, how string) {
	ttl := c.o.Config().Console.SessionTTL
	if ttl <= 0 {
		ttl = config.DefaultConsoleSessionTTL
	}
	// A session this browser had ends: a sign-in always gets a new id.
	if err := c.sessions.end(r.Context(), r); err != nil {
		c.log.Warn("console session store", "error", err)
	}
	id, _, err := c.sessions.create(r.Context(), u, ttl)
	if err != nil {
		c.log.Warn("console session store", "error", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The session store cannot be written; try again shortly.")
		return
	}
	setCookie(w, SessionCookie, id, int(ttl/time.Second), c.secureCookies(r))
	c.log.Info("console sign-in", "sub", u.Subject, "role", u.Role, "dept", u.Dept, "by", how)
	c.record(r.Context(), u.Subject, audit.Event{Action: audit.ActionConsoleSignedIn, Target: "sub:" + u.Subject,
		Summary: fmt.Sprintf("%s signed in to the console (%s) as %s", u.Subject, how, u.Role)})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout serves POST /ui/logout: the session ends on the server, and
// the cookie is cleared.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	s, err := c.sessions.get(r.Context(), r)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The session store cannot be read; try again shortly.")
		return
	}
	if s != nil {
		if !checkCSRF(w, r, s) {
			c.fail(w, r, http.StatusForbidden, "This form has expired or did not come from the console (CSRF check): reload the page and try again.")
			return
		}
		if err := c.sessions.end(r.Context(), r); err != nil {
			c.log.Warn("console session store", "error", err)
			c.fail(w, r, http.StatusServiceUnavailable, "The session could not be ended; try again shortly.")
			return
		}
		c.record(r.Context(), s.User.Subject, audit.Event{Action: audit.ActionConsoleSignedOut,
			Target: "sub:" + s.User.Subject, Summary: s.User.Subject + " signed out of the console"})
	}
	setCookie(w, SessionCookie, "", -1, c.secureCookies(r))
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// record stores e with actor as its actor; a failure is logged, as the
// console's own events change nothing.
func (c *Console) record(ctx context.Context, actor string, e audit.Event) {
	if c.o.Audit == nil {
		return
	}
	e.Actor = actor
	if e.Time.IsZero() {
		e.Time = c.o.Now()
	}
	if err := c.o.Audit.Record(context.WithoutCancel(ctx), e); err != nil {
		c.log.Warn("console audit", "action", e.Action, "error", err)
	}
}
