package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// startProvider runs the provider on a free loopback port until the test
// ends and returns its issuer URL, read from the line it prints.
func startProvider(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), pw)
		pw.CloseWithError(err)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("provider: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("provider printed no issuer: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	iss, ok := strings.CutPrefix(strings.TrimSpace(line), "issuer ")
	if !ok {
		t.Fatalf("provider printed %q, want issuer URL", line)
	}
	return iss
}

// TestCodeFlowCarriesClaims signs in through the login form with the
// authorization-code flow and PKCE, as the console does, and checks the
// verified ID token's and the userinfo answer's claims.
func TestCodeFlowCarriesClaims(t *testing.T) {
	const redirect = "http://127.0.0.1:1/ui/callback" // never fetched: the client stops at it
	iss := startProvider(t, "-client-id", "console", "-client-secret", "s3cret", "-redirect-uri", redirect,
		"-user", "sub=alice,password=pw-a,email=alice@example.test,dept=eng,role=admin",
		"-user", "sub=bob,password=pw-b,dept=sales,groups=viewers|sales-admins")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	relying, err := rp.NewRelyingPartyOIDC(ctx, iss, "console", "s3cret", redirect, []string{"openid", "email", "profile"})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, user, password string
		want                 map[string]any // claims of the ID token
		wantErr              bool
	}{
		{name: "admin", user: "alice", password: "pw-a", want: map[string]any{
			"sub": "alice", "email": "alice@example.test", "dept": "eng", "role": "admin"}},
		{name: "groups", user: "bob", password: "pw-b", want: map[string]any{
			"sub": "bob", "dept": "sales", "groups": []any{"viewers", "sales-admins"}}},
		{name: "wrong password", user: "alice", password: "pw-b", wantErr: true},
		{name: "unknown user", user: "mallory", password: "pw-a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifier := "verifier-" + tt.name + "-0123456789abcdefghijklmnopqrstuvwxyz"
			authURL := rp.AuthURL("state-1", relying, rp.WithCodeChallenge(oidc.NewSHACodeChallenge(verifier)))
			code, err := signIn(ctx, authURL, redirect, tt.user, tt.password)
			if tt.wantErr {
				if err == nil {
					t.Fatal("signed in with a wrong password or user")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, code, relying, rp.WithCodeVerifier("wrong-"+verifier)); err == nil {
				t.Fatal("code exchanged with a wrong PKCE verifier")
			}
			code, err = signIn(ctx, authURL, redirect, tt.user, tt.password)
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, code, relying, rp.WithCodeVerifier(verifier))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got := tokens.IDTokenClaims.Claims[k]; !reflect.DeepEqual(got, v) {
					t.Errorf("ID token claim %s = %#v, want %#v", k, got, v)
				}
			}
			info, err := rp.Userinfo[*oidc.UserInfo](ctx, tokens.AccessToken, tokens.TokenType, tt.user, relying)
			if err != nil {
				t.Fatal(err)
			}
			if info.Subject != tt.user || !reflect.DeepEqual(info.Claims["dept"], tt.want["dept"]) {
				t.Errorf("userinfo sub %q dept %v, want %s %v", info.Subject, info.Claims["dept"], tt.user, tt.want["dept"])
			}
		})
	}
}

// signIn follows authURL to the login form, posts the user's name and
// password as a browser would, and returns the code of the redirect to
// redirect.
func signIn(ctx context.Context, authURL, redirect, user, password string) (string, error) {
	jar, _ := cookiejar.New(nil)
	var code string
	c := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirect) {
			code = req.URL.Query().Get("code")
			return http.ErrUseLastResponse
		}
		return nil
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if resp.StatusCode != 200 || id == "" {
		return "", errors.New("no login form: " + resp.Request.URL.String())
	}
	form := url.Values{"id": {id}, "username": {user}, "password": {password}}
	login := resp.Request.URL.ResolveReference(&url.URL{Path: "/login/username"})
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, login.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = c.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if code == "" {
		return "", errors.New("sign-in ended without a code, status " + resp.Status)
	}
	return code, nil
}

func TestFlagsRefused(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no secret", []string{"-redirect-uri", "http://127.0.0.1/cb", "-user", "sub=a,password=p"}},
		{"no user", []string{"-client-secret", "s", "-redirect-uri", "http://127.0.0.1/cb"}},
		{"user without password", []string{"-client-secret", "s", "-redirect-uri", "http://127.0.0.1/cb", "-user", "sub=a"}},
		{"user sets iss", []string{"-client-secret", "s", "-redirect-uri", "http://127.0.0.1/cb", "-user", "sub=a,password=p,iss=x"}},
		{"not key=value", []string{"-client-secret", "s", "-redirect-uri", "http://127.0.0.1/cb", "-user", "sub=a,password"}},
		{"not loopback", []string{"-listen", "0.0.0.0:0", "-client-secret", "s", "-redirect-uri", "http://127.0.0.1/cb", "-user", "sub=a,password=p"}},
		{"issuer with a path", []string{"-listen", "127.0.0.1:0", "-issuer", "http://127.0.0.1:1/oidc", "-client-secret", "s", "-redirect-uri", "http://127.0.0.1/cb", "-user", "sub=a,password=p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := run(context.Background(), tt.args, io.Discard); err == nil {
				t.Fatal("run accepted the flags")
			}
		})
	}
}
