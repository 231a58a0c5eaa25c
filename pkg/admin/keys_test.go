package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// keyStoreFor returns an *apikey.Store on an embedded JetStream server; w,
// when not nil, is started on the same bucket.
func keyStoreFor(t *testing.T, w *apikey.Watcher) *apikey.Store {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := apikey.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	if w == nil {
		close(done)
	} else {
		go func() { defer close(done); _ = w.Run(ctx, kv) }()
		<-w.Ready()
	}
	return apikey.NewStore(kv, nil, nil)
}

// lockedBuffer is a log sink for concurrent handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func send(t *testing.T, method, url, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// TestKeys creates, lists, rotates and revokes API keys on the admin
// listener, with the logger capturing everything at debug level: the
// secret is in the create and rotate answers and in no log line, and the
// list never shows a hash.
func TestKeys(t *testing.T) {
	logs := &lockedBuffer{}
	w := apikey.NewWatcher(nil, nil)
	o := Options{Keys: keyStoreFor(t, w), Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	base := start(t, o)

	r := send(t, "POST", base+"/admin/keys", `{"sub":"batch","dept":"research","team":"nlp","name":"nightly","models":["gpt-*"],
		"budgets":[{"scope":"key","value":"*","amount_usd":5,"period":"day"}],"rpm":60}`)
	var created newKey
	if r.status != 201 || json.Unmarshal([]byte(r.body), &created) != nil || !strings.HasPrefix(created.Token, apikey.Prefix+created.ID+"_") ||
		created.CreatedBy != "loopback" || created.Team != "nlp" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	waitVerified(t, w, created.Token)

	r = send(t, "POST", base+"/admin/keys/"+created.ID+"/rotate", "")
	var rotated newKey
	if r.status != 200 || json.Unmarshal([]byte(r.body), &rotated) != nil || rotated.ID != created.ID || rotated.Token == created.Token {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	waitVerified(t, w, rotated.Token)

	r = send(t, "GET", base+"/admin/keys", "")
	var list []apikey.Key
	if r.status != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list) != 1 || list[0].ID != created.ID ||
		strings.Contains(r.body, "hash") || strings.Contains(r.body, created.Token[len(created.Token)-43:]) ||
		strings.Contains(r.body, rotated.Token[len(rotated.Token)-43:]) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	if r = send(t, "DELETE", base+"/admin/keys/"+created.ID, ""); r.status != 200 || !strings.Contains(r.body, "revoked_at") {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		typ                      string
	}{
		{"revoke unknown", "DELETE", "/admin/keys/0123456789abcdef", "", 404, "not_found"},
		{"revoke malformed id", "DELETE", "/admin/keys/nope", "", 404, "not_found"},
		{"rotate revoked", "POST", "/admin/keys/" + created.ID + "/rotate", "", 409, "key_revoked"},
		{"create without dept", "POST", "/admin/keys", `{"sub":"s"}`, 400, "invalid_key"},
		{"create with a typo", "POST", "/admin/keys", `{"sub":"s","dept":"d","rpn":5}`, 400, "invalid_request"},
		{"create with a bad budget", "POST", "/admin/keys", `{"sub":"s","dept":"d","budgets":[{"scope":"org","period":"day"}]}`, 400, "invalid_key"},
		{"wrong method", "PUT", "/admin/keys", "", 405, "method_not_allowed"},
		{"get one key", "GET", "/admin/keys/" + created.ID, "", 405, "method_not_allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := send(t, tc.method, base+tc.path, tc.body)
			if r.status != tc.status || errorType(t, r) != tc.typ {
				t.Errorf("%d %s, want %d %s", r.status, r.body, tc.status, tc.typ)
			}
		})
	}
	out := logs.String()
	if !strings.Contains(out, "api key created") || !strings.Contains(out, "api key revoked") {
		t.Errorf("key changes not logged:\n%s", out)
	}
	for _, tok := range []string{created.Token, rotated.Token} {
		if strings.Contains(out, tok[len(tok)-43:]) {
			t.Errorf("a secret is in the log:\n%s", out)
		}
	}
}

func waitVerified(t *testing.T, w *apikey.Watcher, tok string) {
	t.Helper()
	for range 5000 {
		if _, err := w.Verify([]byte(tok)); err == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("key never verified")
}

// TestKeysNotConfigured: without Options.Keys the endpoints answer 404.
func TestKeysNotConfigured(t *testing.T) {
	base := start(t, Options{})
	for _, rt := range [][2]string{{"GET", "/admin/keys"}, {"POST", "/admin/keys"}, {"DELETE", "/admin/keys/0123456789abcdef"}} {
		if r := send(t, rt[0], base+rt[1], "{}"); r.status != 404 || errorType(t, r) != "not_configured" {
			t.Errorf("%s %s: %d %s", rt[0], rt[1], r.status, r.body)
		}
	}
}
