package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/tokenize"
	usagepkg "github.com/tollgate/tollgate/pkg/usage"
)

// startKeyGateway runs a gateway on deploy/verify/tollgate.yaml in front
// of mockllm, with API keys and the usage stream on an embedded NATS
// server, as the gateway program wires them; it returns the gateway's and
// NATS's URLs.
func startKeyGateway(t *testing.T) (gwURL, natsURL string) {
	t.Helper()
	mock := mockllm.New(mockllm.Config{})
	mln := listenLoopback(t)
	go func() { _ = mock.Serve(mln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	t.Setenv("MOCKLLM_URL", "http://"+mln.Addr().String()+"/v1")
	s, err := gateway.LoadSettings("../../deploy/verify/tollgate.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}

	ns := natstest.Start(t)
	ucfg := usagepkg.Config{SpoolDir: t.TempDir()}
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	if err := usagepkg.EnsureStream(ctx, js, usagepkg.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	pub, err := usagepkg.NewPublisher(js, ucfg, log)
	if err != nil {
		t.Fatal(err)
	}
	g.Go(func() error { return pub.Run(ctx) })
	keys, _, err := apikey.Start(ctx, &g, js, 1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Config: s.Config, Verifier: s.Verifier, Logger: log, Keys: keys,
		Accounting: gateway.Accounting{Publisher: pub, Prices: s.Prices, Estimator: tokenize.New()}})
	if err != nil {
		t.Fatal(err)
	}
	gln := listenLoopback(t)
	go func() { _ = gw.Serve(gln) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = gw.Shutdown(sctx)
	})
	return "http://" + gln.Addr().String(), ns.ClientURL()
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// chat sends one chat completion with key and returns the status and the
// error code of a refusal.
func chat(t *testing.T, gwURL, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", gwURL+"/v1/chat/completions",
		strings.NewReader(`{"model":"verify-chat","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error struct{ Code string } }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code
}

// waitChat polls until a chat with key answers status.
func waitChat(t *testing.T, gwURL, key string, status int, code string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, c := chat(t, gwURL, key)
		if s == status && c == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %d %q, want %d %q", s, c, status, code)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKeysCommand runs `tollctl keys` end to end against a gateway: create
// a key, use it, rotate it (the old secret fails, the new one works), run
// `tollctl verify` with it, list, revoke.
func TestKeysCommand(t *testing.T) {
	gwURL, natsURL := startKeyGateway(t)
	nf := []string{"--nats", natsURL}
	code, out, errOut := run1(t, map[string]string{"USER": "ops"}, append([]string{"keys", "create"}, append(nf,
		"--sub", "verify", "--dept", "verify", "--models", "verify-*", "--name", "kit", "--rpm", "100000",
		"--budget", "key:*:10:month", "--expires", "720h", "--json")...)...)
	if code != 0 {
		t.Fatalf("create: exit %d: %s%s", code, out, errOut)
	}
	var created struct {
		ID        string `json:"id"`
		Key       string `json:"key"`
		CreatedBy string `json:"created_by"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || strings.Count(out, "\n") != 1 ||
		!strings.HasPrefix(created.Key, "tg-"+created.ID+"_") || created.CreatedBy != "tollctl:ops" {
		t.Fatalf("create --json printed %q: %v", out, err)
	}
	waitChat(t, gwURL, created.Key, 200, "")

	code, out, errOut = run1(t, nil, append(append([]string{"keys", "rotate", "--json"}, nf...), created.ID)...)
	var rotated struct{ ID, Key string }
	if code != 0 || json.Unmarshal([]byte(out), &rotated) != nil || rotated.ID != created.ID || rotated.Key == created.Key {
		t.Fatalf("rotate: exit %d: %s%s", code, out, errOut)
	}
	waitChat(t, gwURL, created.Key, 401, "invalid_api_key")
	waitChat(t, gwURL, rotated.Key, 200, "")

	t.Run("verify with the API key", func(t *testing.T) {
		code, out, errOut := run1(t, nil, "verify", "--gateway", gwURL, "--token", rotated.Key, "--nats", natsURL, "--wait", "20s")
		if code != 0 || !strings.Contains(out, "cases pass") {
			t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
		}
	})

	code, out, errOut = run1(t, nil, append([]string{"keys", "list", "--json"}, nf...)...)
	if code != 0 || !strings.Contains(out, created.ID) || strings.Contains(out, "hash") ||
		strings.Contains(out, rotated.Key[len(rotated.Key)-43:]) || strings.Contains(out, created.Key[len(created.Key)-43:]) {
		t.Fatalf("list: exit %d: %s%s", code, out, errOut)
	}
	code, out, _ = run1(t, nil, append([]string{"keys", "list"}, nf...)...)
	if code != 0 || !strings.Contains(out, "kit") || !strings.Contains(out, "active") {
		t.Fatalf("list table: %s", out)
	}

	code, out, errOut = run1(t, nil, append(append([]string{"keys", "revoke"}, nf...), created.ID)...)
	if code != 0 || !strings.Contains(out, "revoked API key "+created.ID) {
		t.Fatalf("revoke: exit %d: %s%s", code, out, errOut)
	}
	waitChat(t, gwURL, rotated.Key, 401, "key_revoked")

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"create without dept", []string{"keys", "create", "--sub", "s"}, 2, "give --sub and --dept"},
		{"bad budget", []string{"keys", "create", "--sub", "s", "--dept", "d", "--budget", "key:10"}, 2, "SCOPE:VALUE:USD:PERIOD"},
		{"bad expiry", []string{"keys", "create", "--sub", "s", "--dept", "d", "--expires", "soon"}, 2, "--expires"},
		{"revoke without id", []string{"keys", "revoke"}, 2, "exactly one key ID"},
		{"revoke unknown", append(append([]string{"keys", "revoke"}, nf...), "0123456789abcdef"), 1, "not found"},
		{"rotate revoked", append(append([]string{"keys", "rotate"}, nf...), created.ID), 1, "revoked"},
		{"keys alone", []string{"keys"}, 2, "keys create"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run1(t, nil, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("exit %d, want %d; stderr lacks %q:\n%s", code, tc.code, tc.stderr, errOut)
			}
		})
	}
}
