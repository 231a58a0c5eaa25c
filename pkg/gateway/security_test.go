package gateway

import (
	"bufio"
	"bytes"
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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/valyala/fasthttp"
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
	waitFor(t, 5*time.Second, "the request log line", func() bool {
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
