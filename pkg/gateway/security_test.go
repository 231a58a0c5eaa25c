package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
	"github.com/valyala/fasthttp"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// rawExchange writes req as is on a new connection to the rig and reads one
// response.
func (r *rig) rawExchange(t testing.TB, req string) (*http.Response, []byte) {
	t.Helper()
	return r.rawSend(t, req, false)
}

// rawSend is rawExchange; with closeWrite the client then closes its
// side of the connection, as a client that stops sending does.
func (r *rig) rawSend(t testing.TB, req string, closeWrite bool) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, body
}

// requestHead is the start of a raw chat request up to its headers' end.
func requestHead(token string, extra ...string) string {
	h := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
	if token != "" {
		h += "Authorization: Bearer " + token + "\r\n"
	}
	for _, e := range extra {
		h += e + "\r\n"
	}
	return h + "\r\n"
}

func TestOversizedHeaders(t *testing.T) {
	r := newRig(t, nil)
	tok := r.token(nil)
	tests := []struct {
		name   string
		req    string
		status int
		code   string
	}{
		{"one 16 KiB header", requestHead(tok, "X-Big: "+strings.Repeat("a", 16<<10)), 431, "headers_too_large"},
		{"a thousand headers", requestHead(tok, strings.Repeat("X-Many: v\r\n", 1000)+"X-Last: v"), 431, "headers_too_large"},
		{"12 KiB URL", "GET /v1/models?" + strings.Repeat("q", 12<<10) + " HTTP/1.1\r\nHost: gw\r\n\r\n", 431, "headers_too_large"},
		{"16 KiB token", requestHead(strings.Repeat("t", 16<<10)), 431, "headers_too_large"},
		// Under the limit a large header is read and judged on its merits.
		{"6 KiB token reaches auth", requestHead(strings.Repeat("t", 6<<10)), 401, "invalid_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.rawExchange(t, tc.req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			typ := typeInvalidRequest
			if tc.status == 401 {
				typ = typeAuthentication
			}
			errorShape(t, body, typ, tc.code)
			if bytes.Contains(body, []byte("aaaa")) || bytes.Contains(body, []byte("tttt")) {
				t.Errorf("error echoes the header: %.200s", body)
			}
		})
	}
}

func TestOversizedBody(t *testing.T) {
	r := newRig(t, nil) // body_limit 65536
	tok := r.token(nil)
	big := `{"model":"mock-gpt","messages":[{"role":"user","content":"` + strings.Repeat("x", 70000) + `"}]}`
	chunked := func(body string, size int) string {
		var b strings.Builder
		for len(body) > 0 {
			n := min(size, len(body))
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		return b.String() + "0\r\n\r\n"
	}
	tests := []struct {
		name   string
		req    string
		status int
		code   string
	}{
		// Request bodies stream (pass-through uploads): the gateway reads
		// the first 8 KiB before it judges the Content-Length, never the rest.
		{"content-length over the limit, 8 KiB sent", requestHead(tok, "Content-Length: 70000") + big[:8<<10], 413, "request_too_large"},
		{"content-length of a terabyte", requestHead(tok, "Content-Length: 1000000000000") + big[:8<<10], 413, "request_too_large"},
		{"content-length under the real size", requestHead(tok, "Content-Length: 30") + big, 400, "invalid_json"},
		{"chunked over the limit", requestHead(tok, "Transfer-Encoding: chunked") + chunked(big, 4096), 413, "request_too_large"},
		{"one chunk claiming 64 GiB", requestHead(tok, "Transfer-Encoding: chunked") + "1000000000\r\n" + strings.Repeat("x", 70000), 413, "request_too_large"},
		{"chunked under the limit", requestHead(tok, "Transfer-Encoding: chunked") + chunked(chatBody, 7), 200, ""},
		{"negative content-length", requestHead(tok, "Content-Length: -1") + chatBody, 400, ""},
		{"content-length not a number", requestHead(tok, "Content-Length: 12abc") + chatBody, 400, ""},
		// RFC 9112 6.3: Transfer-Encoding wins over Content-Length, and the
		// connection is closed after the answer (a smuggling attempt).
		{"content-length and chunked", requestHead(tok, "Content-Length: 4", "Transfer-Encoding: chunked") + chunked(chatBody, 7), 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.rawExchange(t, tc.req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 {
				if strings.Contains(tc.name, "content-length and") && !resp.Close {
					t.Error("the connection stays open after a request with both Content-Length and Transfer-Encoding")
				}
				return
			}
			if tc.code != "" {
				errorShape(t, body, typeInvalidRequest, tc.code)
			} else {
				errorShape(t, body, typeInvalidRequest, "")
			}
		})
	}
}

func TestHostileJSON(t *testing.T) {
	r := newRig(t, nil)
	tok := r.token(nil)
	// Deep, but under the 64 KiB body limit of the rig.
	deepArr := strings.Repeat("[", 30000) + strings.Repeat("]", 30000)
	deepObj := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	msgs := func(content string) string {
		return `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"` + content + `"}]}`
	}
	tests := []struct {
		name      string
		path      string
		body      string
		status    int
		anthropic bool
	}{
		{"chat nested arrays", "/v1/chat/completions", `{"model":"mock-gpt","messages":` + deepArr + `}`, 400, false},
		{"chat nested objects", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":` + deepObj + `}]}`, 400, false},
		{"completions nested", "/v1/completions", `{"model":"mock-gpt","prompt":` + deepArr + `}`, 400, false},
		{"embeddings nested", "/v1/embeddings", `{"model":"mock-embed","input":` + deepArr + `}`, 400, false},
		{"messages nested", "/v1/messages", `{"model":"mock-gpt","max_tokens":16,"messages":` + deepArr + `}`, 400, true},
		{"count_tokens nested", "/v1/messages/count_tokens", `{"model":"mock-gpt","messages":` + deepObj + `}`, 400, true},
		{"chat invalid utf-8", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"a` + "\xff\xfe" + `b"}]}`, 400, false},
		{"chat overlong utf-8 slash", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"` + "\xc0\xaf" + `"}]}`, 400, false},
		{"chat utf-8 surrogate bytes", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"` + "\xed\xa0\x80" + `"}]}`, 400, false},
		{"chat invalid utf-8 in a key", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"x"}],"` + "\xff" + `":1}`, 400, false},
		{"embeddings invalid utf-8", "/v1/embeddings", `{"model":"mock-embed","input":"` + "\x80" + `"}`, 400, false},
		{"completions invalid utf-8", "/v1/completions", `{"model":"mock-gpt","prompt":"` + "\xf8\x88\x80\x80\x80" + `"}`, 400, false},
		{"messages invalid utf-8", "/v1/messages", msgs("\xff"), 400, true},
		{"count_tokens invalid utf-8", "/v1/messages/count_tokens", msgs("\xff"), 400, true},
		{"raw control character", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"a` + "\x00" + `b"}]}`, 400, false},
		// Escapes are JSON, not raw bytes: they pass through for the provider to judge.
		{"escaped lone surrogate passes", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"\ud800"}]}`, 200, false},
		{"escaped NUL passes", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"a\u0000b"}]}`, 200, false},
		{"multi-byte utf-8 passes", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"héllo wörld 日本 🎉"}]}`, 200, false},
		{"messages utf-8 passes", "/v1/messages", msgs("日本 🎉"), 200, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.post(tc.path, tok, tc.body)
			body := readBody(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 {
				return
			}
			if tc.anthropic {
				anthropicErrorShape(t, body, "invalid_request_error")
				return
			}
			msg := errorShape(t, body, typeInvalidRequest, "invalid_json")
			if strings.ContainsAny(msg, "\xff\x80") {
				t.Errorf("error message carries the raw bytes: %q", msg)
			}
		})
	}
}

// anthropicErrorShape checks an Anthropic error body and its error type.
func anthropicErrorShape(t *testing.T, body []byte, wantType string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != wantType || e.Error.Message == "" {
		t.Errorf("not an Anthropic %s error (%v): %s", wantType, err, body)
	}
}

// TestCountTokensIsAdmitted is issue 41, finding 12, as an attacker tries
// it: /v1/messages/count_tokens on an anthropic provider spends the
// organisation's upstream quota, so it must be rate limited, refused to a
// principal over budget, recorded (a usage event of cost 0) and logged
// like every request. The local count (other providers) is recorded too.
func TestCountTokensIsAdmitted(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		passConfig(c)
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "research", AmountUSD: "1", Period: "day"}}
		c.Models = append(c.Models, config.Model{Name: "claude-count", Targets: []config.Target{{Provider: "claude"}}})
	})
	const path = "/v1/messages/count_tokens"
	body := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"count these five words"}]}`
	}
	upstream := func() int64 { return a.mock.Stats().Requests }
	limited := a.token(func(o *auth.MintOptions) { o.RPM = 2 })
	start := upstream()
	for i, want := range []int{200, 200, 429} {
		resp := a.post(path, limited, body("claude-count"))
		b := readBody(t, resp)
		if resp.StatusCode != want {
			t.Fatalf("call %d: status %d, want %d: %s", i+1, resp.StatusCode, want, b)
		}
		if want == 200 && !strings.Contains(string(b), `"input_tokens":`) {
			t.Errorf("call %d: %s", i+1, b)
		}
		if want == 429 {
			anthropicErrorShape(t, b, "rate_limit_error")
		}
	}
	if n := upstream() - start; n != 2 {
		t.Errorf("the provider counted %d times, want 2 (the rpm of the token)", n)
	}
	// One image spends $0.04 of the department's day; a token whose own
	// claim allows the department $0.01 a day is then over budget.
	if resp := a.post("/v1/images/generations", a.token(nil), `{"model":"mock-image","prompt":"x"}`); resp.StatusCode != 200 {
		t.Fatalf("image: %d %s", resp.StatusCode, readBody(t, resp))
	} else {
		readBody(t, resp)
	}
	over := a.token(func(o *auth.MintOptions) {
		o.Budgets = []auth.BudgetClaim{{Scope: "dept", AmountUSD: 0.01, Period: "day"}}
	})
	start = upstream()
	resp := a.post(path, over, body("claude-count"))
	b := readBody(t, resp)
	if resp.StatusCode != 429 || !strings.Contains(string(b), "budget exceeded") {
		t.Fatalf("over budget: status %d, want 429 budget exceeded: %s", resp.StatusCode, b)
	}
	anthropicErrorShape(t, b, "rate_limit_error")
	if upstream() != start {
		t.Error("the provider was called for a principal over budget")
	}
	// Counted by the gateway for a model on another provider kind; an
	// image model is not served here.
	resp = a.post(path, a.token(nil), body("mock-gpt"))
	if b := readBody(t, resp); resp.StatusCode != 200 || resp.Header.Get("x-tollgate-estimated") != "true" {
		t.Errorf("local count: %d %s (estimated %q)", resp.StatusCode, b, resp.Header.Get("x-tollgate-estimated"))
	}
	resp = a.post(path, a.token(nil), body("mock-image"))
	if b := readBody(t, resp); resp.StatusCode != 400 || !strings.Contains(string(b), "is not served on /v1/messages/count_tokens") {
		t.Errorf("image model: %d %s", resp.StatusCode, b)
	}
	var got []string
	for _, ev := range a.events(t, 7) {
		if ev.Endpoint == path {
			got = append(got, fmt.Sprintf("%d %s %d", ev.StatusCode, ev.ErrorType, ev.CostNanoUsd))
		}
	}
	want := []string{"200  0", "200  0", "429 rate_limit_exceeded 0", "429 budget_exceeded 0", "200  0", "400 wrong_endpoint 0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("count_tokens events %q, want %q", got, want)
	}
	if n := strings.Count(a.logs.String(), `"endpoint":"/v1/messages/count_tokens"`); n != len(want) {
		t.Errorf("%d log lines for count_tokens, want %d", n, len(want))
	}
}

// TestSlowClients holds connections open the slowloris way; the server's
// read and idle timeouts must close each one long before the client is done.
func TestSlowClients(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.ReadTimeout, c.IdleTimeout = 500*time.Millisecond, 500*time.Millisecond })
	tok := r.token(nil)
	full := requestHead(tok, "Content-Length: "+strconv.Itoa(len(chatBody))) + chatBody
	headEnd := strings.Index(full, "\r\n\r\n")
	tests := []struct {
		name  string
		quick string // sent at once
		slow  string // then one byte every 100 ms
		ka    bool   // first complete a request, then idle
	}{
		{"headers one byte at a time", "", full[:headEnd], false},
		{"body one byte at a time", full[:headEnd+4], chatBody, false},
		{"connects and sends nothing", "", "", false},
		{"idles after a keep-alive request", full, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
				br := bufio.NewReader(conn)
				if tc.ka {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Errorf("keep-alive request: %v", err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				_, _ = io.Copy(io.Discard, br) // until the server closes (or the deadline)
			}()
			if _, err := io.WriteString(conn, tc.quick); err != nil {
				t.Fatal(err)
			}
			sent := 0
		loop:
			for i := 0; i < len(tc.slow) || (tc.slow == "" && i < 100); i++ {
				select {
				case <-closed:
					break loop
				case <-time.After(100 * time.Millisecond):
				}
				if i < len(tc.slow) {
					if _, err := conn.Write([]byte{tc.slow[i]}); err != nil {
						break
					}
					sent++
				}
			}
			select {
			case <-closed:
			default:
				t.Fatalf("the server kept the connection open for %d bytes sent one by one", sent)
			}
			if len(tc.slow) > 0 && sent == len(tc.slow) {
				t.Errorf("the client could send all %d slow bytes", sent)
			}
		})
	}
}

// floodUpstream answers every request with an endless fast SSE stream and
// reports when the gateway has closed its connection.
func floodUpstream(t *testing.T) (url string, closed <-chan struct{}) {
	ln := listen(t)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		ev := []byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("w", 1024) + `"}}]}` + "\n\n")
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
		for i := 0; i < 1<<18; i++ { // at most 256 MiB; a stalled reader blocks the writes long before
			if _, err := c.Write(ev); err != nil {
				break
			}
		}
		once.Do(func() { close(done) })
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return "http://" + ln.Addr().String() + "/v1", done
}

// TestClientThatNeverReads streams to a client that sends a request and
// then never reads: once the socket buffers are full, write_timeout must
// disconnect it and close the upstream call, not hold both forever.
func TestClientThatNeverReads(t *testing.T) {
	upURL, upClosed := floodUpstream(t)
	r := newRigFor(t, nil, upURL, func(c *config.Config) {
		c.WriteTimeout = 300 * time.Millisecond
		c.Providers[0].Timeouts.Idle, c.Providers[0].Timeouts.Total = time.Minute, time.Minute
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"x"}]}`
	if _, err := io.WriteString(conn, requestHead(r.token(nil), "Content-Length: "+strconv.Itoa(len(body)))+body); err != nil {
		t.Fatal(err)
	}
	select {
	case <-upClosed:
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway still holds the upstream stream of a client that never reads")
	}
	testkit.Wait(t, 5*time.Second, "the request log line", func() bool {
		return strings.Contains(r.logs.String(), `"error":"client_write_timeout"`)
	})
	if !strings.Contains(r.logs.String(), "client stopped reading") {
		t.Errorf("no warning about the stalled client: %s", r.logs.String())
	}
}

// rsIssuer adds an RS256 issuer to the rig's config and returns its
// private key and the PEM of its public key.
func rsIssuer(t *testing.T) (*rsa.PrivateKey, []byte, func(*config.Config)) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	return key, pub, func(c *config.Config) {
		c.Auth.Issuers = append(c.Auth.Issuers, config.Issuer{Name: "rs", Issuer: "tollgate-rs", Audience: testAudience,
			Algorithms: []string{"RS256"}, Keys: []config.Key{{KID: "r1", PublicKey: string(pub)}}})
		c.MaxHeaderBytes = 64 << 10 // let oversized tokens reach the verifier
	}
}

// signJWT signs claims with method and key, with extra header fields.
func signJWT(t *testing.T, method jwt.SigningMethod, key any, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTAttackMatrix(t *testing.T) {
	rsKey, rsPub, addRS := rsIssuer(t)
	r := newRig(t, addRS)
	now := time.Now()
	claims := func(mutate func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "sub": "mallory", "dept": "research",
			"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	rsClaims := func(mutate func(jwt.MapClaims)) jwt.MapClaims {
		return claims(func(c jwt.MapClaims) {
			c["iss"] = "tollgate-rs"
			if mutate != nil {
				mutate(c)
			}
		})
	}
	hs := func(header map[string]any, c jwt.MapClaims) string {
		if header == nil {
			header = map[string]any{"kid": "k1"}
		}
		return signJWT(t, jwt.SigningMethodHS256, []byte(testSecret), header, c)
	}
	rs := func(header map[string]any, c jwt.MapClaims) string {
		if header == nil {
			header = map[string]any{"kid": "r1"}
		}
		return signJWT(t, jwt.SigningMethodRS256, rsKey, header, c)
	}
	der, _ := pem.Decode(rsPub)
	otherRS, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	valid := hs(nil, claims(nil))
	parts := strings.Split(valid, ".")
	tests := []struct {
		name string
		// header is the Authorization value; query is added to the URL.
		header, query string
		code          string
	}{
		{name: "alg none", header: "Bearer " + noneToken(t), code: "invalid_token"},
		{name: "alg None for the RS issuer", header: "Bearer " + unsignedToken(`{"alg":"None","kid":"r1"}`, rsClaims(nil)), code: "invalid_token"},
		{name: "alg none with a signature", header: "Bearer " + unsignedToken(`{"alg":"none","kid":"k1"}`, claims(nil)) + parts[2], code: "invalid_token"},
		{name: "HS256 signed with the RS public key PEM", header: "Bearer " + signJWT(t, jwt.SigningMethodHS256, rsPub, map[string]any{"kid": "r1"}, rsClaims(nil)), code: "invalid_token"},
		{name: "HS256 signed with the RS public key DER", header: "Bearer " + signJWT(t, jwt.SigningMethodHS256, der.Bytes, map[string]any{"kid": "r1"}, rsClaims(nil)), code: "invalid_token"},
		{name: "HS256 token for the RS issuer without kid", header: "Bearer " + signJWT(t, jwt.SigningMethodHS256, rsPub, map[string]any{}, rsClaims(nil)), code: "invalid_token"},
		{name: "RS256 for the HS issuer", header: "Bearer " + rs(map[string]any{"kid": "k1"}, claims(nil)), code: "invalid_token"},
		{name: "RS256 signed by another key", header: "Bearer " + signJWT(t, jwt.SigningMethodRS256, otherRS, map[string]any{"kid": "r1"}, rsClaims(nil)), code: "invalid_token"},
		{name: "wrong issuer", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["iss"] = "evil" })), code: "invalid_token"},
		{name: "issuer differs in case", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["iss"] = strings.ToUpper(testIssuer) })), code: "invalid_token"},
		{name: "issuer as an array", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["iss"] = []string{testIssuer} })), code: "invalid_token"},
		{name: "wrong audience", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["aud"] = "other" })), code: "invalid_token"},
		{name: "expired", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })), code: "invalid_token"},
		{name: "expired RS", header: "Bearer " + rs(nil, rsClaims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })), code: "invalid_token"},
		{name: "nbf in the future", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })), code: "invalid_token"},
		{name: "iat in the future", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() })), code: "invalid_token"},
		{name: "missing exp", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { delete(c, "exp") })), code: "invalid_token"},
		{name: "missing aud", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { delete(c, "aud") })), code: "invalid_token"},
		{name: "missing iss", header: "Bearer " + hs(nil, claims(func(c jwt.MapClaims) { delete(c, "iss") })), code: "invalid_token"},
		{name: "empty claims", header: "Bearer " + hs(nil, jwt.MapClaims{}), code: "invalid_token"},
		{name: "unknown kid", header: "Bearer " + hs(map[string]any{"kid": "k9"}, claims(nil)), code: "invalid_token"},
		{name: "kid path traversal", header: "Bearer " + hs(map[string]any{"kid": "../../../../etc/passwd"}, claims(nil)), code: "invalid_token"},
		{name: "kid of the other issuer", header: "Bearer " + hs(map[string]any{"kid": "r1"}, claims(nil)), code: "invalid_token"},
		{name: "kid as a URL", header: "Bearer " + hs(map[string]any{"kid": "https://evil.example/key"}, claims(nil)), code: "invalid_token"},
		{name: "kid not a string", header: "Bearer " + hs(map[string]any{"kid": 1}, claims(nil)), code: "invalid_token"},
		{name: "embedded jwk and jku are ignored", header: "Bearer " + signJWT(t, jwt.SigningMethodRS256, otherRS,
			map[string]any{"kid": "r1", "jku": "https://evil.example/jwks", "x5u": "https://evil.example/x5",
				"jwk": map[string]any{"kty": "RSA", "n": b64url(otherRS.N.Bytes()), "e": "AQAB"}}, rsClaims(nil)), code: "invalid_token"},
		{name: "signature of another token", header: "Bearer " + parts[0] + "." + strings.Split(hs(nil, claims(func(c jwt.MapClaims) { c["sub"] = "root" })), ".")[1] + "." + parts[2], code: "invalid_token"},
		{name: "oversized token", header: "Bearer " + parts[0] + "." + b64url([]byte(`{"iss":"`+testIssuer+`","pad":"`+strings.Repeat("p", 20<<10)+`"}`)) + "." + parts[2], code: "invalid_token"},
		{name: "garbage base64", header: "Bearer " + "eyJ!!!.eyJ???." + parts[2], code: "invalid_token"},
		{name: "padded base64", header: "Bearer " + parts[0] + "==." + parts[1] + "." + parts[2], code: "invalid_token"},
		{name: "payload not JSON", header: "Bearer " + parts[0] + "." + b64url([]byte("not json")) + "." + parts[2], code: "invalid_token"},
		{name: "four segments", header: "Bearer " + valid + ".x", code: "invalid_token"},
		{name: "empty segments", header: "Bearer ..", code: "invalid_token"},
		{name: "token in the query string", query: "?access_token=" + valid, code: "missing_token"},
		{name: "token in the query as key", query: "?key=" + valid + "&api_key=" + valid, code: "missing_token"},
		{name: "token in x-api-key on an OpenAI endpoint", header: "", code: "missing_token"},
		{name: "basic scheme", header: "Basic " + valid, code: "missing_token"},
		{name: "token without scheme", header: valid, code: "missing_token"},
	}
	leaks := func(body []byte, tok string) bool {
		if tok == "" {
			return false
		}
		for _, p := range strings.Split(tok, ".") {
			if len(p) >= 16 && bytes.Contains(body, []byte(p)) {
				return true
			}
		}
		return false
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", r.url+"/v1/chat/completions"+tc.query, strings.NewReader(chatBody))
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			if strings.Contains(tc.name, "x-api-key") {
				req.Header.Set("x-api-key", valid)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(t, resp)
			if resp.StatusCode != 401 {
				t.Fatalf("status %d, want 401: %.300s", resp.StatusCode, body)
			}
			errorShape(t, body, typeAuthentication, tc.code)
			if resp.Header.Get("X-Should-Retry") != "false" {
				t.Error("a 401 must tell clients not to retry")
			}
			tok, _ := strings.CutPrefix(tc.header, "Bearer ")
			if leaks(body, tok) || leaks(body, valid) {
				t.Errorf("the error echoes the token: %.300s", body)
			}
		})
	}
	// The matrix can fail: the same issuers accept their own tokens.
	for name, tok := range map[string]string{"HS256": valid, "RS256": rs(nil, rsClaims(nil))} {
		resp := r.post("/v1/chat/completions", tok, chatBody)
		if body := readBody(t, resp); resp.StatusCode != 200 {
			t.Errorf("valid %s token: status %d: %s", name, resp.StatusCode, body)
		}
	}
	if logs := r.logs.String(); leaks([]byte(logs), valid) {
		t.Error("a token reached the logs")
	}
}

// unsignedToken encodes header and claims with an empty signature.
func unsignedToken(header string, claims jwt.MapClaims) string {
	b, _ := json.Marshal(claims)
	return b64url([]byte(header)) + "." + b64url(b) + "."
}

// recordingUpstream serves the mock behind a handler that records the
// headers and body of every request it receives.
type recordingUpstream struct {
	mu      sync.Mutex
	headers []string // each request's header block as received
	bodies  []string // and its body
	addr    string
}

func newRecordingUpstream(t *testing.T) (*recordingUpstream, *mockllm.Server) {
	mock := mockllm.New(mockllm.Config{})
	rec := &recordingUpstream{}
	h := mock.Handler()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		rec.mu.Lock()
		rec.headers = append(rec.headers, string(ctx.Request.Header.Header()))
		rec.bodies = append(rec.bodies, string(ctx.Request.Body()))
		rec.mu.Unlock()
		h(ctx)
	}}
	ln := listen(t)
	rec.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return rec, mock
}

func (u *recordingUpstream) last(t *testing.T) string {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.headers) == 0 {
		t.Fatal("the upstream received no request")
	}
	h := u.headers[len(u.headers)-1]
	u.headers, u.bodies = nil, nil
	return h
}

// lastRequest is last with the request's body.
func (u *recordingUpstream) lastRequest(t *testing.T) (header, body string) {
	t.Helper()
	u.mu.Lock()
	if len(u.bodies) > 0 {
		body = u.bodies[len(u.bodies)-1]
	}
	u.mu.Unlock()
	return u.last(t), body
}

// TestHeaderInjection sends client headers that must never reach a
// provider (credentials, Host, provider-specific and hop-by-hop headers,
// CR/LF tricks) through every provider kind and checks the header block
// the upstream received.
func TestHeaderInjection(t *testing.T) {
	up, mock := newRecordingUpstream(t)
	evil := []string{
		"x-api-key: evil-client-key", "api-key: evil-client-key", "x-goog-api-key: evil-client-key",
		"Proxy-Authorization: Basic evil", "Cookie: session=evil", "Upgrade: evil/1", "Te: evil",
		"Trailer: X-Evil", "Keep-Alive: timeout=999, evil=1", "Proxy-Connection: evil", "X-Forwarded-Host: evil.example",
		"X-Amz-Security-Token: evil", "X-Amz-Date: evil", "Anthropic-Version: evil-version", "Openai-Organization: evil-org",
		"X-Stainless-Evil: evil", "Forwarded: host=evil.example",
	}
	kinds := []struct {
		kind, path, body, credential string
		native                       bool
	}{
		{kind: "openai", path: "/v1/chat/completions", body: chatBody, credential: "Authorization: Bearer " + testProvKey},
		{kind: "openai", path: "/v1/messages", body: `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`, credential: "Authorization: Bearer " + testProvKey},
		{kind: "azure", path: "/v1/chat/completions", body: chatBody, credential: "Api-Key: " + testProvKey},
		{kind: "anthropic", path: "/v1/chat/completions", body: chatBody, credential: "X-Api-Key: " + testProvKey},
		{kind: "anthropic", path: "/v1/messages", body: `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`, credential: "X-Api-Key: " + testProvKey, native: true},
		{kind: "gemini", path: "/v1/chat/completions", body: chatBody, credential: "X-Goog-Api-Key: " + testProvKey},
		{kind: "bedrock", path: "/v1/chat/completions", body: chatBody, credential: "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"},
	}
	for _, k := range kinds {
		t.Run(k.kind+k.path, func(t *testing.T) {
			r := newRigFor(t, mock, "http://"+up.addr+"/v1", func(c *config.Config) {
				p := &c.Providers[0]
				p.Kind = k.kind
				switch k.kind {
				case "azure":
					p.APIVersion = "2024-10-21"
				case "anthropic", "gemini":
					p.BaseURL = strings.TrimSuffix(p.BaseURL, "/v1")
				case "bedrock":
					p.BaseURL, p.Region, p.AccessKeyID, p.SecretAccessKey, p.APIKey = strings.TrimSuffix(p.BaseURL, "/v1"), "us-east-1", "AKIDEXAMPLE", testProvKey, ""
				}
			})
			tok := r.token(nil)
			hdrs := append([]string{"Authorization: Bearer " + tok, "Connection: keep-alive, X-Evil-Hop", "X-Evil-Hop: evil",
				"X-Request-Id: req-ok-1"}, evil...)
			if k.native {
				for i, h := range hdrs {
					if strings.HasPrefix(h, "Anthropic-Version:") {
						hdrs[i] = "Anthropic-Version: 2023-06-01" // passed through on the native path by design
					}
				}
			}
			resp, body := r.rawExchange(t, strings.Replace(requestHead("", append(hdrs, "Content-Length: "+strconv.Itoa(len(k.body)))...), "/v1/chat/completions", k.path, 1)+k.body)
			// The mock does not serve Azure's deployment paths: only the
			// headers it received matter here.
			if resp.StatusCode != 200 && k.kind != "azure" {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			got := up.last(t)
			low := strings.ToLower(got)
			for _, bad := range []string{"evil", tok, "gw\r\n", "proxy-", "cookie", "upgrade", "trailer", "keep-alive: timeout"} {
				if strings.Contains(low, strings.ToLower(bad)) {
					t.Errorf("upstream received %q:\n%s", bad, got)
				}
			}
			if !strings.Contains(got, "Host: "+up.addr+"\r\n") {
				t.Errorf("upstream Host is not the provider's:\n%s", got)
			}
			if !strings.Contains(strings.ToLower(got), strings.ToLower(k.credential)) {
				t.Errorf("upstream lacks the gateway's credential %q:\n%s", k.credential, got)
			}
		})
	}
	// Header values cannot smuggle a header of their own: bare CR, obsolete
	// line folding and NUL are refused or folded into one value.
	r := newRigFor(t, mock, "http://"+up.addr+"/v1", nil)
	tok := r.token(nil)
	for _, tc := range []struct{ name, line string }{
		{"bare CR", "X-Request-Id: a\rX-Injected: evil"},
		{"obs-fold", "X-Request-Id: a\r\n X-Injected: evil"},
		{"bare LF", "X-Request-Id: a\nX-Injected: evil"},
		{"NUL", "X-Request-Id: a\x00X-Injected: evil"},
		{"CR in traceparent", "Traceparent: 00-\rX-Injected: evil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.rawExchange(t, requestHead(tok, tc.line, "Content-Length: "+strconv.Itoa(len(chatBody)))+chatBody)
			up.mu.Lock()
			var got string
			if len(up.headers) > 0 {
				got = up.headers[len(up.headers)-1]
			}
			up.headers = nil
			up.mu.Unlock()
			if strings.Contains(strings.ToLower(got), "injected") || strings.Contains(got, "evil") {
				t.Errorf("status %d: upstream received the injected header:\n%s", resp.StatusCode, got)
			}
			if bytes.Contains(body, []byte("\r")) || strings.Contains(resp.Header.Get("X-Request-Id"), "\r") {
				t.Errorf("response carries the raw CR: %q", resp.Header)
			}
		})
	}
}

// statusRe finds the status a keyEcho request asks for in its message text,
// which every provider translation keeps.
var statusRe = regexp.MustCompile(`status:(\d{3})`)

// keyEcho is an upstream that puts the credential it received everywhere it
// can: error bodies, response headers and mid-stream error events.
func keyEcho(t *testing.T) string {
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		h := &ctx.Request.Header
		key := string(h.Peek("Authorization")) + string(h.Peek("x-api-key")) + string(h.Peek("api-key")) + string(h.Peek("x-goog-api-key"))
		ctx.Response.Header.Set("X-Echo-Key", key)
		ctx.Response.Header.Set("Retry-After", key)
		status := 200
		if m := statusRe.FindSubmatch(ctx.Request.Body()); m != nil {
			status, _ = strconv.Atoi(string(m[1]))
		}
		if status == 0 {
			status = 200
		}
		ctx.SetStatusCode(status)
		if status != 200 {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"type":"error","error":{"message":"Incorrect API key provided: ` + key + `","type":"invalid_request_error","code":"` + key + `"},"message":"` + key + `"}`)
			return
		}
		ctx.SetContentType("text/event-stream")
		if strings.Contains(string(ctx.Path()), "/messages") {
			ctx.SetBodyString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n" +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"bad key " + key + "\"}}\n\n")
			return
		}
		ctx.SetBodyString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
			`data: {"error":{"message":"key ` + key + ` is over quota","type":"server_error"}}` + "\n\n")
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

// TestUpstreamKeyNeverLeaks runs a matrix of upstream failures against an
// upstream that echoes the gateway's key, for every credential style, and
// checks every response header, body and log line for the key.
func TestUpstreamKeyNeverLeaks(t *testing.T) {
	upURL := keyEcho(t)
	kinds := []struct{ kind, path string }{
		{"openai", "/v1/chat/completions"},
		{"azure", "/v1/chat/completions"},
		{"anthropic", "/v1/chat/completions"},
		{"anthropic", "/v1/messages"},
		{"gemini", "/v1/chat/completions"},
		{"openai", "/v1/messages"},
	}
	for _, k := range kinds {
		t.Run(k.kind+k.path, func(t *testing.T) {
			r := newRigFor(t, nil, upURL, func(c *config.Config) {
				p := &c.Providers[0]
				p.Kind = k.kind
				switch k.kind {
				case "azure":
					p.APIVersion = "2024-10-21"
				case "anthropic", "gemini":
					p.BaseURL = strings.TrimSuffix(p.BaseURL, "/v1")
				}
			})
			tok := r.token(nil)
			for _, status := range []string{"400", "401", "403", "404", "408", "413", "422", "429", "500", "502", "503", "529", "200"} {
				for _, stream := range []string{"false", "true"} {
					if status == "200" && stream == "false" {
						continue // a success passes the provider's answer through
					}
					body := `{"model":"mock-gpt","max_tokens":16,"stream":` + stream + `,"messages":[{"role":"user","content":"status:` + status + `"}]}`
					resp := r.post(k.path, tok, body)
					got := readBody(t, resp)
					if bytes.Contains(got, []byte(testProvKey)) {
						t.Errorf("status %s stream %s: key in the body: %s", status, stream, got)
					}
					for name, vs := range resp.Header {
						for _, v := range vs {
							if strings.Contains(v, testProvKey) {
								t.Errorf("status %s stream %s: key in header %s", status, stream, name)
							}
						}
					}
					if resp.StatusCode == 200 && !bytes.Contains(got, []byte("error")) {
						t.Errorf("status %s stream %s: the mid-stream error was lost: %s", status, stream, got)
					}
				}
			}
			if strings.Contains(r.logs.String(), testProvKey) {
				t.Errorf("key in the logs:\n%s", r.logs.String())
			}
			if !strings.Contains(r.logs.String(), `"status":`) {
				t.Error("no request was logged: the log check cannot fail")
			}
		})
	}
}

// TestMultipartDuplicateModel sends uploads with a second model field
// (issue #41, finding 6): the gateway routes, checks the allow-list and
// prices by one, so a provider that reads the last would serve a model the
// token may not use, at another price. Each form is refused with 400, and
// the provider never serves it: a second field in the form's head before
// any upstream call, one after the file (or spelled otherwise) while the
// form streams, so the provider receives a cut request.
func TestMultipartDuplicateModel(t *testing.T) {
	r := newRig(t, passConfig)
	tok := r.token(func(o *auth.MintOptions) { o.Models = []string{"mock-whisper"} })
	audio := bytes.Repeat([]byte{7}, 64<<10)
	part := func(b *bytes.Buffer, boundary, header, value string) {
		fmt.Fprintf(b, "--%s\r\n%s\r\n\r\n%s\r\n", boundary, header, value)
	}
	const boundary = "b0undary"
	build := func(after string) []byte {
		var b bytes.Buffer
		part(&b, boundary, `Content-Disposition: form-data; name="model"`, "mock-whisper")
		part(&b, boundary, `Content-Disposition: form-data; name="file"; filename="a.wav"`, string(audio))
		if after != "" {
			part(&b, boundary, after, "gpt-4o-transcribe")
		}
		fmt.Fprintf(&b, "--%s--\r\n", boundary)
		return b.Bytes()
	}
	twice := func() []byte {
		var b bytes.Buffer
		part(&b, boundary, `Content-Disposition: form-data; name="model"`, "mock-whisper")
		part(&b, boundary, `Content-Disposition: form-data; name="model"`, "gpt-4o-transcribe")
		part(&b, boundary, `Content-Disposition: form-data; name="file"; filename="a.wav"`, string(audio))
		fmt.Fprintf(&b, "--%s--\r\n", boundary)
		return b.Bytes()
	}
	tests := []struct {
		name, code string
		body       []byte
		chunked    bool
	}{
		{"second model before the file", "duplicate_key", twice(), false},
		{"second model after the file", "duplicate_key", build(`Content-Disposition: form-data; name="model"`), false},
		{"second model after the file, chunked", "duplicate_key", build(`Content-Disposition: form-data; name="model"`), true},
		{"second model unquoted, header in lower case", "duplicate_key", build(`content-disposition: form-data; name=model`), false},
		{"second model in RFC 2231 spelling", "duplicate_key", build(`Content-Disposition: form-data; name*=utf-8''model`), false},
		{"part header without a disposition", "invalid_multipart", build(`Content-Type: text/plain`), false},
		{"part header that does not parse", "invalid_multipart", build(`Content-Disposition: form-data; name="model`), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := r.mock.Stats().UploadBytes
			size := int64(len(tc.body))
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				size, body = -1, io.MultiReader(body) // hides the length: sent chunked
			}
			resp := r.send("POST", "/v1/audio/transcriptions", tok, "multipart/form-data; boundary="+boundary, body, size)
			got := readBody(t, resp)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, got)
			}
			errorShape(t, got, typeInvalidRequest, tc.code)
			if n := r.mock.Stats().UploadBytes; n != before {
				t.Errorf("the provider read a whole upload (%d bytes)", n-before)
			}
		})
	}
	// The same form with one model field is served.
	resp := r.send("POST", "/v1/audio/transcriptions", tok, "multipart/form-data; boundary="+boundary, bytes.NewReader(build("")), int64(len(build(""))))
	if got := readBody(t, resp); resp.StatusCode != 200 {
		t.Fatalf("one model field: status %d: %s", resp.StatusCode, got)
	}
}

// tenants are the two departments' principals of the ownership tests, and
// a teammate of the first (same department, another subject).
var (
	tenantA  = func(o *auth.MintOptions) { o.Subject, o.Dept, o.Team = "alice", "research", "nlp" }
	teammate = func(o *auth.MintOptions) { o.Subject, o.Dept, o.Team = "carol", "research", "nlp" }
	tenantB  = func(o *auth.MintOptions) { o.Subject, o.Dept, o.Team = "bob", "finance", "ap" }
)

// upload creates a file as the holder of tok and returns its id.
func (r *rig) upload(t *testing.T, tok string, content string) string {
	t.Helper()
	ct, body := form(t, [][2]string{{"purpose", "batch"}, {"file", ""}}, []byte(content))
	resp := r.send("POST", "/v1/files", tok, ct, bytes.NewReader(body), int64(len(body)))
	got := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("upload: status %d: %s", resp.StatusCode, got)
	}
	var f struct{ ID string }
	if err := json.Unmarshal(got, &f); err != nil || f.ID == "" {
		t.Fatalf("upload answer without an id: %s", got)
	}
	return f.ID
}

// listIDs lists path as the holder of tok and returns the ids it shows.
func (r *rig) listIDs(t *testing.T, path, tok string) []string {
	t.Helper()
	resp := r.send("GET", path, tok, "", nil, 0)
	got := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("list %s: status %d: %s", path, resp.StatusCode, got)
	}
	var l struct {
		Object string
		Data   []struct{ ID string }
	}
	if err := json.Unmarshal(got, &l); err != nil || l.Object != "list" {
		t.Fatalf("list %s: not a list: %s", path, got)
	}
	ids := []string{}
	for _, d := range l.Data {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestFilesAndBatchesOwned attacks another tenant's files and batches
// (issue #41, finding 1). Tenant B uploads a file and submits a batch;
// tenant A (another department) and A's teammate (same department, other
// subject) list, read, download, delete and cancel them, submit a batch on
// B's file and have a model read it in chat and Responses content. Each
// attempt gets the 404 an id that does not exist gets, and lists show only
// the caller's objects; B keeps full use of its own. A second gateway on
// the same NATS (a replica, or this one after a restart) knows the owners.
func TestFilesAndBatchesOwned(t *testing.T) {
	ns := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	store := startOwnersOn(t, js)
	r := newRig(t, passConfig) // mock-gpt runs in batches
	r.swapOwners(t, store)
	a, mate, b := r.token(tenantA), r.token(teammate), r.token(tenantB)

	fileB := r.upload(t, b, `{"custom_id":"1","method":"POST","url":"/v1/chat/completions","body":{"model":"mock-gpt","messages":[{"role":"user","content":"secret of B"}],"max_tokens":5}}`+"\n")
	resp := r.send("POST", "/v1/batches", b, "application/json",
		strings.NewReader(`{"input_file_id":"`+fileB+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), -1)
	got := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("B's batch: status %d: %s", resp.StatusCode, got)
	}
	var batch struct{ ID string }
	_ = json.Unmarshal(got, &batch)
	fileA := r.upload(t, a, `{"custom_id":"a"}`+"\n")

	chat := func(ref string) string {
		return `{"model":"mock-gpt","messages":[{"role":"user","content":[{"type":"text","text":"summarise"},` + ref + `]}]}`
	}
	attacks := []struct {
		name, method, path, body, param string
	}{
		{"get B's file", "GET", "/v1/files/" + fileB, "", "id"},
		{"download B's file", "GET", "/v1/files/" + fileB + "/content", "", "id"},
		{"delete B's file", "DELETE", "/v1/files/" + fileB, "", "id"},
		{"get B's batch", "GET", "/v1/batches/" + batch.ID, "", "id"},
		{"cancel B's batch", "POST", "/v1/batches/" + batch.ID + "/cancel", "", "id"},
		{"batch on B's file", "POST", "/v1/batches", `{"input_file_id":"` + fileB + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "input_file_id"},
		{"chat file part naming B's file", "POST", "/v1/chat/completions", chat(`{"type":"file","file":{"file_id":"` + fileB + `"}}`), "file_id"},
		{"chat file part, key escaped", "POST", "/v1/chat/completions", chat(`{"type":"file","file":{"\u0066ile_id":"` + fileB + `"}}`), "file_id"},
		{"responses input_file naming B's file", "POST", "/v1/responses",
			`{"model":"mock-gpt","input":[{"role":"user","content":[{"type":"input_file","file_id":"` + fileB + `"}]}]}`, "file_id"},
	}
	for _, who := range []struct{ name, tok string }{{"other department", a}, {"teammate", mate}} {
		for _, at := range attacks {
			t.Run(who.name+"/"+at.name, func(t *testing.T) {
				before := r.mock.Stats().Requests
				resp := r.send(at.method, at.path, who.tok, "application/json", strings.NewReader(at.body), int64(len(at.body)))
				got := readBody(t, resp)
				if resp.StatusCode != 404 {
					t.Fatalf("status %d, want 404: %s", resp.StatusCode, got)
				}
				errorShape(t, got, typeInvalidRequest, "not_found")
				if n := r.mock.Stats().Requests - before; n != 0 {
					t.Errorf("the provider received %d requests", n)
				}
				// The answer is the one an id that does not exist gets.
				missing := strings.NewReplacer(fileB, "file-nope", batch.ID, "batch_nope")
				resp = r.send(at.method, missing.Replace(at.path), who.tok, "application/json",
					strings.NewReader(missing.Replace(at.body)), int64(len(missing.Replace(at.body))))
				if got2 := readBody(t, resp); resp.StatusCode != 404 || missing.Replace(string(got)) != string(got2) {
					t.Errorf("a missing id gets %d %s; B's id got %s", resp.StatusCode, got2, got)
				}
			})
		}
	}
	t.Run("messages document naming B's file", func(t *testing.T) {
		body := `{"model":"mock-gpt","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"` + fileB + `"}}]}]}`
		before := r.mock.Stats().Requests
		resp := r.send("POST", "/v1/messages", a, "application/json", strings.NewReader(body), int64(len(body)))
		got := readBody(t, resp)
		if resp.StatusCode != 404 {
			t.Fatalf("status %d, want 404: %s", resp.StatusCode, got)
		}
		anthropicErrorShape(t, got, "not_found_error")
		if n := r.mock.Stats().Requests - before; n != 0 {
			t.Errorf("the provider received %d requests", n)
		}
	})
	t.Run("lists show the caller's own", func(t *testing.T) {
		for _, c := range []struct {
			name, path, tok string
			want            []string
		}{
			{"A's files", "/v1/files", a, []string{fileA}},
			{"teammate's files", "/v1/files", mate, []string{}},
			{"B's files", "/v1/files", b, []string{fileB}},
			{"A's batches", "/v1/batches", a, []string{}},
			{"B's batches", "/v1/batches?limit=5", b, []string{batch.ID}},
		} {
			if got := r.listIDs(t, c.path, c.tok); !slices.Equal(got, c.want) {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	})
	t.Run("the owner keeps full use", func(t *testing.T) {
		for _, c := range []struct{ method, path, tok, body string }{
			{"GET", "/v1/files/" + fileB + "/content", b, ""},
			{"GET", "/v1/batches/" + batch.ID, b, ""},
			{"POST", "/v1/chat/completions", a, chat(`{"type":"file","file":{"file_id":"` + fileA + `"}}`)},
		} {
			resp := r.send(c.method, c.path, c.tok, "application/json", strings.NewReader(c.body), int64(len(c.body)))
			if got := readBody(t, resp); resp.StatusCode != 200 {
				t.Errorf("%s %s: status %d: %s", c.method, c.path, resp.StatusCode, got)
			}
		}
	})
	t.Run("another gateway knows the owners", func(t *testing.T) {
		// A fresh store on the same bucket: a replica, or this gateway
		// after a restart.
		r2 := newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, passConfig)
		r2.swapOwners(t, startOwnersOn(t, js))
		if got := r2.listIDs(t, "/v1/files", b); !slices.Equal(got, []string{fileB}) {
			t.Errorf("B's files on the second gateway: %v", got)
		}
		resp := r2.send("GET", "/v1/files/"+fileB, a, "", nil, 0)
		if got := readBody(t, resp); resp.StatusCode != 404 {
			t.Errorf("A reads B's file on the second gateway: %d %s", resp.StatusCode, got)
		}
		// Created on the first gateway, used at once on the second: found
		// in the bucket before the second's watch delivers it.
		fresh := r.upload(t, b, "x\n")
		resp = r2.send("DELETE", "/v1/files/"+fresh, b, "", nil, 0)
		if got := readBody(t, resp); resp.StatusCode != 200 {
			t.Errorf("B deletes its new file on the second gateway: %d %s", resp.StatusCode, got)
		}
		// The first gateway learns of the deletion from its watch; until
		// then it still asks the provider, which no longer has the file.
		testkit.Wait(t, 10*time.Second, "the first gateway to answer 404 for the deleted file", func() bool {
			resp := r.send("GET", "/v1/files/"+fresh, b, "", nil, 0)
			readBody(t, resp)
			return resp.StatusCode == 404
		})
	})
}

// swapOwners replaces the rig's gateway with one on the same config and
// listener kind whose owner store is s.
func (r *rig) swapOwners(t *testing.T, s owners) {
	t.Helper()
	gw, err := New(Options{Config: r.cfg, Verifier: r.gw.state.Load().verifier, Logger: r.gw.log, Owners: s})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	r.gw, r.url = gw, "http://"+ln.Addr().String()
}

// TestBatchesChecked submits batches that would run, at the provider and
// billed to the organisation, what the tenant may not run itself (issue
// #41, finding 1): models outside the token's allow-list or not enabled
// for batches, lines that call another endpoint or another model, and
// batches beyond the budget or the token's tpm. Each is refused before the
// provider sees a batch; an allowed batch is reserved and billed at its
// estimate.
func TestBatchesChecked(t *testing.T) {
	a := newAcctRig(t, func(c *config.Config) {
		passConfig(c) // mock-gpt runs in batches; mock-embed does not
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "finance", AmountUSD: "0.001", Period: "day"}}
	})
	line := func(id, url, model string, maxTokens int) string {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
		if maxTokens > 0 {
			body = `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":` + strconv.Itoa(maxTokens) + `}`
		}
		if strings.Contains(url, "embeddings") {
			body = `{"model":"` + model + `","input":"hello"}`
		}
		return `{"custom_id":"` + id + `","method":"POST","url":"` + url + `","body":` + body + "}\n"
	}
	chat := "/v1/chat/completions"
	tests := []struct {
		name     string
		mint     func(*auth.MintOptions)
		file     string
		endpoint string
		status   int
		typ      string
		code     string
	}{
		{"a model the token does not allow", func(o *auth.MintOptions) { tenantA(o); o.Models = []string{"mock-embed"} },
			line("1", chat, "mock-gpt", 5), chat, 403, typePermission, "model_not_allowed"},
		{"a model not enabled for batches", tenantA,
			line("1", "/v1/embeddings", "mock-embed", 0), "/v1/embeddings", 403, typePermission, "batch_not_enabled"},
		{"an unknown model", tenantA, line("1", chat, "gpt-5-secret", 5), chat, 404, typeInvalidRequest, "model_not_found"},
		{"a line for another endpoint", tenantA,
			line("1", chat, "mock-gpt", 5) + line("2", "/v1/embeddings", "mock-embed", 0), chat, 400, typeInvalidRequest, "invalid_batch_file"},
		{"a second model on a later line", func(o *auth.MintOptions) { tenantA(o); o.Models = []string{"mock-gpt"} },
			line("1", chat, "mock-gpt", 5) + line("2", chat, "mock-embed", 5), chat, 400, typeInvalidRequest, "invalid_batch_file"},
		{"a repeated model key in a line", tenantA,
			`{"custom_id":"1","method":"POST","url":"/v1/chat/completions","body":{"model":"mock-gpt","model":"gpt-4o","messages":[]}}` + "\n",
			chat, 400, typeInvalidRequest, "invalid_batch_file"},
		{"an endpoint batches do not call", tenantA, line("1", "/v1/images/generations", "mock-gpt", 5), "/v1/images/generations",
			400, typeInvalidRequest, codeUnsupportedEP},
		{"beyond the department's budget", tenantB, strings.Repeat(line("x", chat, "mock-gpt", 4000), 5), chat,
			429, typeBudget, "budget_exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := a.token(tc.mint)
			file := a.upload(t, tok, tc.file)
			before := a.listIDs(t, "/v1/batches", tok)
			resp := a.send("POST", "/v1/batches", tok, "application/json",
				strings.NewReader(`{"input_file_id":"`+file+`","endpoint":"`+tc.endpoint+`","completion_window":"24h"}`), -1)
			got := readBody(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, got)
			}
			errorShape(t, got, tc.typ, tc.code)
			if after := a.listIDs(t, "/v1/batches", tok); len(after) != len(before) {
				t.Errorf("the provider holds a new batch: %v", after)
			}
		})
	}
	t.Run("a batch's tokens count against the token's tpm", func(t *testing.T) {
		// As any request larger than the tpm: it passes once the token
		// bucket is full and leaves it in debt, so the next is refused.
		tok := a.token(func(o *auth.MintOptions) { tenantA(o); o.Subject, o.TPM = "dave", 1000 })
		file := a.upload(t, tok, strings.Repeat(line("x", chat, "mock-gpt", 400), 3))
		body := `{"input_file_id":"` + file + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`
		resp := a.send("POST", "/v1/batches", tok, "application/json", strings.NewReader(body), -1)
		if got := readBody(t, resp); resp.StatusCode != 200 {
			t.Fatalf("first batch: status %d: %s", resp.StatusCode, got)
		}
		resp = a.send("POST", "/v1/batches", tok, "application/json", strings.NewReader(body), -1)
		got := readBody(t, resp)
		if resp.StatusCode != 429 {
			t.Fatalf("second batch: status %d, want 429: %s", resp.StatusCode, got)
		}
		errorShape(t, got, typeRateLimit, "rate_limit_exceeded")
		if ids := a.listIDs(t, "/v1/batches", tok); len(ids) != 1 {
			t.Errorf("the provider holds %d batches of the token, want 1", len(ids))
		}
	})
	t.Run("an allowed batch is reserved and billed at its estimate", func(t *testing.T) {
		tok := a.token(func(o *auth.MintOptions) { tenantA(o); o.Models = []string{"mock-gpt"} })
		file := a.upload(t, tok, line("1", chat, "mock-gpt", 100)+line("2", chat, "mock-gpt", 100))
		resp := a.send("POST", "/v1/batches", tok, "application/json",
			strings.NewReader(`{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), -1)
		if got := readBody(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, got)
		}
		ev := a.eventOf(t, resp.Header.Get("X-Request-Id"))
		if ev.RequestedModel != "mock-gpt" || !ev.Estimated || ev.CompletionTokens != 200 || ev.CostNanoUsd < 200*600 {
			t.Errorf("batch event: model %q estimated %v completion %d cost %d", ev.RequestedModel, ev.Estimated, ev.CompletionTokens, ev.CostNanoUsd)
		}
	})
}

// eventOf reads usage events until the one of request id.
func (a *acctRig) eventOf(t *testing.T, id string) *usagev1.UsageEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.js.OrderedConsumer(ctx, usage.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var b usagev1.UsageBatch
	for {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("no usage event for %s: %v", id, err)
		}
		if err := usage.DecodeMessage(msg.Data(), &b); err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			if ev.RequestId == id {
				return ev
			}
		}
	}
}
