package main

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

func TestWriteBanner(t *testing.T) {
	tests := []struct {
		name   string
		models []config.Model
		token  string
		want   []string
		absent []string
	}{
		{"no token", []config.Model{{Name: "mock-gpt"}}, "",
			[]string{"listening on http://127.0.0.1:8080", "Mint a token with `tollctl token`"}, []string{"curl"}},
		{"token and a chat model", []config.Model{{Name: "gemini/*"}, {Name: "mock-gpt"}}, "TOK",
			[]string{"Bearer TOK", `"model":"mock-gpt"`, `"stream":true`, "http://127.0.0.1:8080/v1/chat/completions"}, []string{"gemini/*"}},
		{"only wildcard routes", []config.Model{{Name: "gemini/*"}}, "TOK",
			[]string{"A development token (valid 24h): TOK", "wildcard route"}, []string{"curl"}},
	}
	for _, addr := range []string{"0.0.0.0:8080", "[::]:8080", "10.1.2.3:8080", "gateway.internal:8080"} {
		t.Run("not loopback "+addr, func(t *testing.T) {
			var b bytes.Buffer
			writeBanner(&b, &config.Config{Models: []config.Model{{Name: "mock-gpt"}}}, addr, "TOK")
			if strings.Contains(b.String(), "TOK") || !strings.Contains(b.String(), "not on loopback") {
				t.Errorf("banner on %s:\n%s", addr, b.String())
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeBanner(&b, &config.Config{Models: tt.models}, "127.0.0.1:8080", tt.token)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("banner lacks %q:\n%s", w, b.String())
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("banner has %q:\n%s", a, b.String())
				}
			}
		})
	}
}

// TestBannerAndDevSecretOnListeners starts listeners on loopback and on
// the wildcard address (issue 41, finding 18): only the loopback banner
// prints the development token, and the public development secret on the
// wildcard listener is logged as a warning and exported as a gauge.
func TestBannerAndDevSecretOnListeners(t *testing.T) {
	const token = "eyJ.dev-token.sig"
	tests := []struct {
		name       string
		listen     string
		secret     string
		wantToken  bool
		wantExpose bool
	}{
		{"loopback, public secret", "127.0.0.1:0", auth.PublicDevSecret, true, false},
		{"ipv6 loopback, public secret", "[::1]:0", auth.PublicDevSecret, true, false},
		{"wildcard, public secret", "0.0.0.0:0", auth.PublicDevSecret, false, true},
		{"wildcard, own secret", "0.0.0.0:0", "an-operator-secret-of-enough-length-0123", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", tt.listen)
			if err != nil {
				t.Skipf("cannot listen on %s here: %v", tt.listen, err)
			}
			defer ln.Close()
			addr := ln.Addr().String()
			cfg := &config.Config{Models: []config.Model{{Name: "mock-gpt"}}, Auth: config.Auth{Issuers: []config.Issuer{
				{Name: auth.DevIssuer, Keys: []config.Key{{KID: "dev-1", Secret: tt.secret}}}}}}
			var b bytes.Buffer
			writeBanner(&b, cfg, addr, token)
			if got := strings.Contains(b.String(), token); got != tt.wantToken {
				t.Errorf("banner prints the token: %v, want %v:\n%s", got, tt.wantToken, b.String())
			}
			var logs bytes.Buffer
			reg := prometheus.NewRegistry()
			if err := warnDevSecret(reg, slog.New(slog.NewTextHandler(&logs, nil)), func() *config.Config { return cfg }, addr); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "public development HS256 secret"); got != tt.wantExpose {
				t.Errorf("warning logged: %v, want %v: %s", got, tt.wantExpose, logs.String())
			}
			mfs, err := reg.Gather()
			if err != nil || len(mfs) != 1 {
				t.Fatalf("gather: %v %v", mfs, err)
			}
			want := 0.0
			if tt.wantExpose {
				want = 1
			}
			if got := mfs[0].GetMetric()[0].GetGauge().GetValue(); mfs[0].GetName() != "tollgate_auth_public_dev_secret_exposed" || got != want {
				t.Errorf("%s = %v, want %v", mfs[0].GetName(), got, want)
			}
		})
	}
}
