package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// testIdP is an OpenID provider on loopback serving what a verifier reads
// from one, as the specs say: the discovery document (OpenID Connect
// Discovery 1.0) whose issuer is its own URL and whose jwks_uri points at a
// JWK Set (RFC 7517), with Cache-Control. The tests swap its keys (a
// rotation), its answers (attacks) and count its fetches; a full provider
// such as the zitadel/oidc example one does not let a test rotate or
// corrupt its key set on demand, so this one stands in for it.
type testIdP struct {
	srv     *httptest.Server
	mu      sync.Mutex
	jwks    []byte
	cache   string
	status  int
	fetches atomic.Int64
	// jwksHandler, when set, answers /jwks instead.
	jwksHandler http.HandlerFunc
}

func newTestIdP(t testing.TB, keys ...map[string]string) *testIdP {
	t.Helper()
	idp := &testIdP{status: http.StatusOK}
	idp.setKeys(t, keys...)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer":%q,"jwks_uri":%q,"id_token_signing_alg_values_supported":["RS256"]}`,
			idp.srv.URL, idp.srv.URL+"/jwks")
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		idp.fetches.Add(1)
		idp.mu.Lock()
		h, body, cache, status := idp.jwksHandler, idp.jwks, idp.cache, idp.status
		idp.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if cache != "" {
			w.Header().Set("Cache-Control", cache)
		}
		w.WriteHeader(status)
		w.Write(body)
	})
	idp.srv = httptest.NewServer(mux)
	t.Cleanup(idp.srv.Close)
	return idp
}

func (idp *testIdP) setKeys(t testing.TB, keys ...map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	idp.setBody(b)
}

func (idp *testIdP) setBody(b []byte) {
	idp.mu.Lock()
	idp.jwks = b
	idp.mu.Unlock()
}

func (idp *testIdP) issuer(refreshMin, refreshMax time.Duration) config.Issuer {
	return config.Issuer{Name: "idp", Issuer: idp.srv.URL, Algorithms: []string{"RS256"},
		DiscoveryURL: idp.srv.URL + config.WellKnownOpenIDConfiguration, JWKSRefreshMin: refreshMin, JWKSRefreshMax: refreshMax}
}

// realClock runs from testNow at the pace of the wall clock, so tokens
// minted at testNow are valid and refresh intervals pass.
func realClock() func() time.Time {
	t0 := time.Now()
	return func() time.Time { return testNow.Add(time.Since(t0)) }
}

// runVerifier builds a verifier for is and runs its fetch loops until the
// test ends.
func runVerifier(t testing.TB, is config.Issuer) *Verifier {
	t.Helper()
	v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{is}, CacheSize: -1}, realClock())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.Run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { cancel(); <-done })
	return v
}

func rsToken(t testing.TB, iss, kid string, key any) []byte {
	return []byte(mint(t, MintOptions{Issuer: iss, Alg: "RS256", KID: kid, Key: key, Subject: "alice"}))
}

func stats(v *Verifier) IssuerStats { return v.Stats()[0] }

// TestRemoteRotation: a key rotated at the provider is accepted without a
// restart, on the unknown kid and on the scheduled refresh.
func TestRemoteRotation(t *testing.T) {
	k := genTestKeys()
	t.Run("unknown kid", func(t *testing.T) {
		idp := newTestIdP(t, jwkOf(t, "a", &k.rsa.PublicKey))
		v := runVerifier(t, idp.issuer(20*time.Millisecond, time.Hour))
		testkit.Wait(t, 5*time.Second, "first keys", func() bool { return stats(v).Keys == 1 })
		if _, err := v.Verify(rsToken(t, idp.srv.URL, "a", k.rsa)); err != nil {
			t.Fatal(err)
		}
		idp.setKeys(t, jwkOf(t, "b", &k.rsa2.PublicKey))
		tokB := rsToken(t, idp.srv.URL, "b", k.rsa2)
		took := testkit.Wait(t, 5*time.Second, "rotated key", func() bool { _, err := v.Verify(tokB); return err == nil })
		t.Logf("rotation to accepted token (unknown kid, jwks_refresh_min 20ms): %s", took)
		if _, err := v.Verify(rsToken(t, idp.srv.URL, "a", k.rsa)); !errors.Is(err, errUnknownKID) {
			t.Errorf("retired key: %v, want unknown kid", err)
		}
	})
	t.Run("refresh", func(t *testing.T) {
		idp := newTestIdP(t, jwkOf(t, "a", &k.rsa.PublicKey))
		idp.cache = "public, max-age=0"
		v := runVerifier(t, idp.issuer(30*time.Millisecond, time.Hour))
		testkit.Wait(t, 5*time.Second, "first keys", func() bool { return stats(v).Keys == 1 })
		rotated := time.Now()
		idp.setKeys(t, jwkOf(t, "b", &k.rsa2.PublicKey))
		n := idp.fetches.Load()
		testkit.Wait(t, 5*time.Second, "refresh", func() bool { return idp.fetches.Load() > n+1 })
		if _, err := v.Verify(rsToken(t, idp.srv.URL, "b", k.rsa2)); err != nil {
			t.Fatal(err)
		}
		t.Logf("rotation to accepted token (refresh, max-age clamped to 30ms): %s", time.Since(rotated))
	})
}

// TestRemoteKIDFlood: tokens with ever new kids make at most one refetch per
// jwks_refresh_min, never one per token.
func TestRemoteKIDFlood(t *testing.T) {
	k := genTestKeys()
	idp := newTestIdP(t, jwkOf(t, "a", &k.rsa.PublicKey))
	const refreshMin = 100 * time.Millisecond
	v := runVerifier(t, idp.issuer(refreshMin, time.Hour))
	testkit.Wait(t, 5*time.Second, "first keys", func() bool { return stats(v).Keys == 1 })
	start := time.Now()
	for i := range 300 {
		tok := rsToken(t, idp.srv.URL, fmt.Sprintf("flood-%d", i), k.rsa)
		if _, err := v.Verify(tok); !errors.Is(err, errUnknownKID) {
			t.Fatalf("kid flood-%d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	time.Sleep(refreshMin / 2)
	got := idp.fetches.Load()
	bound := 2 + int64((elapsed+refreshMin)/refreshMin)
	t.Logf("300 unknown kids in %s: %d fetches (bound %d)", elapsed, got, bound)
	if got > bound {
		t.Errorf("%d fetches in %s, want at most %d", got, elapsed, bound)
	}
}

// TestRemoteRefused: a key set that is redirected to another host, too
// large, malformed or without a usable key is refused; the issuer keeps no
// keys from it, refuses its tokens and reports why.
func TestRemoteRefused(t *testing.T) {
	k := genTestKeys()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(map[string]any{"keys": []any{jwkOf(t, "a", &k.rsa.PublicKey)}})
		w.Write(b)
	}))
	t.Cleanup(other.Close)
	otherHost := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	rsaWith := func(m map[string]string, key, value string) map[string]string { m[key] = value; return m }
	tests := []struct {
		name  string
		setup func(idp *testIdP)
		want  string
	}{
		{"redirect to another host", func(idp *testIdP) {
			idp.jwksHandler = func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, otherHost+"/jwks", http.StatusFound)
			}
		}, "redirect to another host refused"},
		{"oversized", func(idp *testIdP) {
			idp.setBody([]byte(`{"keys":[]` + strings.Repeat(" ", MaxJWKSBytes) + `}`))
		}, "body is larger than 1048576 bytes"},
		{"malformed", func(idp *testIdP) { idp.setBody([]byte(`{"keys":[{"kty":`)) }, "parse jwks"},
		{"not a set", func(idp *testIdP) { idp.setBody([]byte(`[]`)) }, "parse jwks"},
		{"wrong key type", func(idp *testIdP) { idp.setKeys(t, jwkOf(t, "a", &k.ec.PublicKey)) }, "no key for the issuer's algorithms"},
		{"encryption key", func(idp *testIdP) {
			idp.setKeys(t, rsaWith(jwkOf(t, "a", &k.rsa.PublicKey), "use", "enc"))
		}, "no key for the issuer's algorithms"},
		{"alg not pinned", func(idp *testIdP) {
			idp.setKeys(t, rsaWith(jwkOf(t, "a", &k.rsa.PublicKey), "alg", "PS256"))
		}, "no key for the issuer's algorithms"},
		{"server error", func(idp *testIdP) { idp.status = http.StatusBadGateway }, "status 502"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idp := newTestIdP(t)
			tt.setup(idp)
			v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{idp.issuer(time.Minute, time.Hour)}}, realClock())
			err := v.Refresh(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Refresh = %v, want %q", err, tt.want)
			}
			if _, err := v.Verify(rsToken(t, idp.srv.URL, "a", k.rsa)); !errors.Is(err, errNoKeys) {
				t.Errorf("Verify = %v, want %v", err, errNoKeys)
			}
			if why := v.NotReady(); len(why) != 1 || !strings.Contains(why[0], tt.want) {
				t.Errorf("NotReady = %q", why)
			}
			if s := stats(v); s.Fetches != 1 || s.FetchErrors != 1 {
				t.Errorf("stats %+v, want 1 fetch, 1 error", s)
			}
		})
	}
}

// TestRemoteKeepsGoodKeys: a set where one key is odd keeps the others, and
// a failed refetch keeps the last good keys.
func TestRemoteKeepsGoodKeys(t *testing.T) {
	k := genTestKeys()
	weak := map[string]string{"kty": "RSA", "kid": "weak", "n": b64([]byte{0xc5, 1, 2, 3}), "e": "AQAB"}
	idp := newTestIdP(t, weak, jwkOf(t, "ec", &k.ec.PublicKey), jwkOf(t, "a", &k.rsa.PublicKey))
	v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{idp.issuer(time.Minute, time.Hour)}}, realClock())
	if err := v.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := rsToken(t, idp.srv.URL, "a", k.rsa)
	if _, err := v.Verify(tok); err != nil {
		t.Fatal(err)
	}
	idp.setBody([]byte("<html>maintenance</html>"))
	if err := v.Refresh(context.Background()); err == nil {
		t.Fatal("refresh of a broken set succeeded")
	}
	if _, err := v.Verify(tok); err != nil {
		t.Errorf("after a failed refresh: %v", err)
	}
	if why := v.NotReady(); why != nil {
		t.Errorf("NotReady = %q", why)
	}
}

// TestRemoteDown: a provider unreachable at start leaves the issuer on its
// jwks_file fallback (ready), or with no keys (not ready, tokens refused).
func TestRemoteDown(t *testing.T) {
	k := genTestKeys()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	is := config.Issuer{Name: "idp", Issuer: "https://idp.test", Algorithms: []string{"RS256"},
		JWKSURL: down.URL + "/jwks", JWKSRefreshMin: 10 * time.Millisecond, JWKSRefreshMax: time.Hour}
	tok := rsToken(t, "https://idp.test", "a", k.rsa)

	t.Run("fallback file", func(t *testing.T) {
		is := is
		is.JWKSFile = writeJWKS(t, t.TempDir(), jwkOf(t, "a", &k.rsa.PublicKey))
		v := runVerifier(t, is)
		testkit.Wait(t, 5*time.Second, "failed fetches", func() bool { return stats(v).FetchErrors >= 2 })
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
		if why := v.NotReady(); why != nil {
			t.Errorf("NotReady = %q", why)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{is}}, realClock())
		if why := v.NotReady(); len(why) != 1 || !strings.Contains(why[0], "not fetched yet") {
			t.Errorf("NotReady before a fetch = %q", why)
		}
		v = runVerifier(t, is)
		testkit.Wait(t, 5*time.Second, "failed fetch", func() bool { return stats(v).FetchErrors >= 1 })
		_, err := v.Verify(tok)
		if !errors.Is(err, ErrInvalidToken) || err.Error() != "invalid token: issuer keys are not available yet" {
			t.Errorf("Verify = %v", err)
		}
		why := v.NotReady()
		if len(why) != 1 || !strings.Contains(why[0], `auth issuer "idp" has no keys: fetch jwks:`) {
			t.Errorf("NotReady = %q", why)
		}
	})
}

// TestRemoteURLPolicy: plain http off loopback is refused at start unless
// allowed, and so is a discovery document naming another issuer.
func TestRemoteURLPolicy(t *testing.T) {
	is := config.Issuer{Name: "idp", Issuer: "https://idp.test", Algorithms: []string{"RS256"}, JWKSURL: "http://192.0.2.1/jwks"}
	if _, err := NewVerifier(config.Auth{Issuers: []config.Issuer{is}}, nil); err == nil ||
		!strings.Contains(err.Error(), "plain http is only allowed to a loopback address or with allow_http") {
		t.Errorf("http off loopback: %v", err)
	}
	is.AllowHTTP = true
	if _, err := NewVerifier(config.Auth{Issuers: []config.Issuer{is}}, nil); err != nil {
		t.Errorf("allow_http: %v", err)
	}

	idp := newTestIdP(t)
	c := idp.issuer(time.Minute, time.Hour)
	c.Issuer = "https://elsewhere.test"
	v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{c}}, nil)
	if err := v.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), `discovery document names issuer`) {
		t.Errorf("issuer mismatch: %v", err)
	}
}

// TestRemoteInterval: Cache-Control max-age is clamped to the refresh
// bounds.
func TestRemoteInterval(t *testing.T) {
	r := &remote{min: time.Minute, max: time.Hour}
	for _, tt := range []struct {
		header string
		want   time.Duration
	}{
		{"", time.Hour},
		{"public, max-age=600", 10 * time.Minute},
		{"max-age=5", time.Minute},
		{"max-age=86400, must-revalidate", time.Hour},
		{"no-cache", time.Minute},
		{"max-age=-3", time.Hour},
		{"max-age=99999999999999999999", time.Hour},
	} {
		h := http.Header{}
		h.Set("Cache-Control", tt.header)
		if got := r.interval(h); got != tt.want {
			t.Errorf("%q: %s, want %s", tt.header, got, tt.want)
		}
	}
}

// BenchmarkRefresh is one key refresh from a loopback provider: the HTTP
// round trip, parsing a two-key RSA set and the swap.
func BenchmarkRefresh(b *testing.B) {
	k := genTestKeys()
	idp := newTestIdP(b, jwkOf(b, "a", &k.rsa.PublicKey), jwkOf(b, "b", &k.rsa2.PublicKey))
	c := idp.issuer(time.Minute, time.Hour)
	c.DiscoveryURL, c.JWKSURL = "", idp.srv.URL+"/jwks"
	v := newTestVerifier(b, config.Auth{Issuers: []config.Issuer{c}}, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
