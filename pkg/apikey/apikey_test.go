package apikey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// startWatch returns a Store and a running, loaded Watcher on a bucket of
// an embedded JetStream server.
func startWatch(tb testing.TB, now func() time.Time, observe func(time.Duration)) (*Store, *Watcher) {
	tb.Helper()
	js, err := jetstream.New(natstest.Connect(tb, natstest.Start(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tb.Cleanup(func() { cancel(); <-done })
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		tb.Fatal(err)
	}
	w := NewWatcher(now, observe)
	go func() { defer close(done); _ = w.Run(ctx, kv) }()
	<-w.Ready()
	return NewStore(kv, now, nil), w
}

// waitVerify polls until Verify(token) returns want (nil: success).
func waitVerify(tb testing.TB, w *Watcher, token string, want error) *auth.Principal {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := w.Verify([]byte(token))
		if errors.Is(err, want) || (want == nil && err == nil) {
			return p
		}
		if time.Now().After(deadline) {
			tb.Fatalf("Verify = %v, want %v", err, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeyLifecycle(t *testing.T) {
	s, w := startWatch(t, nil, nil)
	ctx := context.Background()
	spec := Key{Name: "nightly", Subject: "batch", Dept: "research", Team: "nlp", Project: "p1",
		Models: []string{"gpt-*"}, Budgets: []auth.BudgetClaim{{Scope: "key", Value: "*", AmountUSD: 5, Period: "day"}},
		RPM: 60, TPM: 1000, CreatedBy: "ops"}
	tok, k, err := s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, Prefix+k.ID+"_") || len(tok) != tokenLen || !ValidID(k.ID) {
		t.Fatalf("token %q for id %q", tok, k.ID)
	}
	p := waitVerify(t, w, tok, nil)
	if p.KeyID != k.ID || p.Subject != "batch" || p.Dept != "research" || p.Team != "nlp" || p.Project != "p1" ||
		p.RPM != 60 || p.TPM != 1000 || !slices.Equal(p.Models, []string{"gpt-*"}) || len(p.Budgets) != 1 ||
		p.Issuer != Issuer || p.Admin {
		t.Errorf("principal %+v", p)
	}
	wrong := tok[:len(tok)-1] + map[bool]string{true: "B", false: "A"}[tok[len(tok)-1] == 'A']
	if _, err := w.Verify([]byte(wrong)); !errors.Is(err, ErrUnknown) {
		t.Errorf("wrong secret: %v", err)
	}

	newTok, rk, err := s.Rotate(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rk.ID != k.ID || newTok == tok || rk.RotatedAt.IsZero() {
		t.Errorf("rotate: %q %+v", newTok, rk)
	}
	waitVerify(t, w, tok, ErrUnknown)
	if p := waitVerify(t, w, newTok, nil); p.KeyID != k.ID || p.Subject != "batch" {
		t.Errorf("rotated principal %+v", p)
	}

	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	waitVerify(t, w, newTok, ErrRevoked)
	if _, err := w.Verify([]byte(tok)); !errors.Is(err, ErrUnknown) {
		t.Errorf("old secret of a revoked key: %v", err)
	}
	if _, _, err := s.Rotate(ctx, k.ID); !errors.Is(err, ErrRevoked) {
		t.Errorf("rotate revoked: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != k.ID || list[0].RevokedAt.IsZero() || list[0].CreatedBy != "ops" {
		t.Errorf("list %+v", list)
	}
	for _, id := range []string{"0123456789abcdef", "nope", ""} {
		if _, err := s.Revoke(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("revoke %q: %v", id, err)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s, w := startWatch(t, clock, nil)
	ctx := context.Background()
	expiring, _, err := s.Create(ctx, Key{Subject: "a", Dept: "d", ExpiresAt: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	expired, _, err := s.Create(ctx, Key{Subject: "a", Dept: "d", ExpiresAt: now})
	if err != nil {
		t.Fatal(err)
	}
	waitVerify(t, w, expiring, nil)
	waitVerify(t, w, expired, ErrExpired)
	tests := []struct {
		name, token string
		want        error
	}{
		{"expired", expired, ErrExpired},
		{"unknown id", "tg-0123456789abcdef_" + strings.Repeat("A", secretLen), ErrUnknown},
		{"wrong prefix", "tk-" + expiring[3:], ErrMalformed},
		{"short", expiring[:len(expiring)-1], ErrMalformed},
		{"long", expiring + "A", ErrMalformed},
		{"upper-case id", "tg-" + strings.ToUpper(expiring[3:19]) + expiring[19:], ErrMalformed},
		{"bad secret byte", expiring[:len(expiring)-1] + "=", ErrMalformed},
		{"empty", "", ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := w.Verify([]byte(tc.token)); !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCreateChecks(t *testing.T) {
	s, _ := startWatch(t, nil, nil)
	for _, tc := range []struct {
		name string
		spec Key
	}{
		{"no subject", Key{Dept: "d"}},
		{"no dept", Key{Subject: "s"}},
		{"negative rpm", Key{Subject: "s", Dept: "d", RPM: -1}},
		{"bad budget scope", Key{Subject: "s", Dept: "d", Budgets: []auth.BudgetClaim{{Scope: "org", Period: "day"}}}},
		{"bad budget period", Key{Subject: "s", Dept: "d", Budgets: []auth.BudgetClaim{{Scope: "key", Period: "week"}}}},
		{"budget for each team of one dept", Key{Subject: "s", Dept: "d", Budgets: []auth.BudgetClaim{{Scope: "team", Value: "research/*", Period: "day"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := s.Create(context.Background(), tc.spec); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// TestRevocationPropagation measures revoke -> Verify refuses on a
// watching Watcher, and checks the observed delay is reported (logged: p50
// and max; the target is p99 under 100 ms, as for token revocation, which
// the max bounds).
func TestRevocationPropagation(t *testing.T) {
	var observed atomic.Int32
	s, w := startWatch(t, nil, func(time.Duration) { observed.Add(1) })
	ctx := context.Background()
	var lat []time.Duration
	for range 50 {
		tok, k, err := s.Create(ctx, Key{Subject: "s", Dept: "d"})
		if err != nil {
			t.Fatal(err)
		}
		waitVerify(t, w, tok, nil)
		start := time.Now()
		if _, err := s.Revoke(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := w.Verify([]byte(tok)); errors.Is(err, ErrRevoked) {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatal("revocation not seen in 5 s")
			}
			time.Sleep(50 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	// 50 samples have no p99 of their own: the largest is reported.
	t.Logf("api key revocation to refusal: p50 %v, max %v (n=%d)", lat[len(lat)/2], lat[len(lat)-1], len(lat))
	if n := observed.Load(); int(n) != len(lat) {
		t.Errorf("%d propagation delays observed, want %d", n, len(lat))
	}
}

// BenchmarkVerify is a known key checked against a table of 10,000: about
// 130 ns (one SHA-256 of 43 bytes and a map lookup), 0 allocs/op.
func BenchmarkVerify(b *testing.B) {
	w := NewWatcher(nil, nil)
	m := map[[idLen]byte]*entry{}
	var tok string
	for i := range 10_000 {
		id, _ := newID()
		t, hash, _ := newToken(id)
		var r record
		r.ID, r.Subject, r.Dept, r.Hash = id, "s", "d", hash
		var k [idLen]byte
		copy(k[:], id)
		e := &entry{p: r.Principal()}
		if _, err := hex.Decode(e.hash[:], []byte(hash)); err != nil {
			b.Fatal(err)
		}
		m[k] = e
		if i == 0 {
			tok = t
		}
	}
	w.publish(m)
	token := []byte(tok)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := w.Verify(token); err != nil {
			b.Fatal(err)
		}
	}
}

// memRecorder keeps the audit events recorded with it.
type memRecorder struct {
	mu     sync.Mutex
	events []audit.Event
	fail   error
}

func (m *memRecorder) Record(_ context.Context, e audit.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
	return m.fail
}

// TestStoreAudit: every key change records one audit event with the
// actor of its ctx and the key before and after, never a secret or hash;
// a lost event leaves the change made and says so.
func TestStoreAudit(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := EnsureBucket(context.Background(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	rec := &memRecorder{}
	s := NewStore(kv, nil, rec)
	ctx := audit.WithActor(context.Background(), "alice")
	tok, k, err := s.Create(ctx, Key{Subject: "job", Dept: "eng", CreatedBy: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	tok2, _, err := s.Rotate(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{audit.ActionKeyCreated, audit.ActionKeyRotated, audit.ActionKeyRevoked}
	if len(rec.events) != len(want) {
		t.Fatalf("%d events, want %d", len(rec.events), len(want))
	}
	for i, e := range rec.events {
		if e.Action != want[i] || e.Actor != "alice" || e.Target != "key:"+k.ID || len(e.After) == 0 {
			t.Errorf("event %d: %+v", i, e)
		}
		for _, secret := range []string{tok, tok2, tok[len(tok)-20:], tok2[len(tok2)-20:]} {
			if strings.Contains(string(e.Before)+string(e.After)+e.Summary, secret) {
				t.Errorf("event %d carries the key's secret", i)
			}
		}
		for _, tk := range []string{tok, tok2} {
			sum := sha256.Sum256([]byte(tk[len(tk)-secretLen:]))
			hash := hex.EncodeToString(sum[:])
			if text := string(e.Before) + string(e.After) + e.Summary; strings.Contains(text, hash) || strings.Contains(text, hash[:16]) {
				t.Errorf("event %d carries the key's hash", i)
			}
		}
	}
	if rec.events[0].Before != nil || rec.events[2].Before == nil {
		t.Error("a new key has no before; a revoked one has")
	}
	rec.fail = fmt.Errorf("%w: nats down", audit.ErrNotRecorded)
	tok3, k3, err := s.Create(ctx, Key{Subject: "job", Dept: "eng"})
	if !errors.Is(err, audit.ErrNotRecorded) || tok3 == "" || k3.ID == "" {
		t.Fatalf("lost audit event: token %q id %q err %v; want the key made and ErrNotRecorded", tok3, k3.ID, err)
	}
}

// TestList lists an empty bucket, then keys created and changed: each
// once, with its last state, oldest first.
func TestList(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var n atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Second) }
	s, _ := startWatch(t, clock, nil)
	ctx := context.Background()
	if list, err := s.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("empty bucket: %+v, %v", list, err)
	}
	var ids []string
	for i := range 30 {
		_, k, err := s.Create(ctx, Key{Subject: fmt.Sprint("s", i), Dept: "d"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, k.ID)
	}
	if _, _, err := s.Rotate(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, ids[7]); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(ids) {
		t.Fatalf("%d keys listed, want %d", len(list), len(ids))
	}
	for i, k := range list {
		if k.ID != ids[i] {
			t.Fatalf("key %d is %s, want %s (oldest first)", i, k.ID, ids[i])
		}
	}
	if list[3].RotatedAt.IsZero() || list[7].RevokedAt.IsZero() || !list[0].RevokedAt.IsZero() {
		t.Errorf("the list does not hold each key's last state: %+v %+v", list[3], list[7])
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.List(cancelled); err == nil {
		t.Error("List with a cancelled context succeeded")
	}
}
