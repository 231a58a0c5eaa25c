package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMalformedRequestNoEcho sends, over a raw socket, requests the HTTP
// parser refuses, each carrying a credential (issue 41, finding 11): the
// answer is a generic OpenAI-shaped 400 with no byte of the request in it.
func TestMalformedRequestNoEcho(t *testing.T) {
	r := newRig(t, nil)
	addr := strings.TrimPrefix(r.url, "http://")
	const bearer = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.SIGNATURE-9f8e7d"
	const apiKey = "tg-0123456789abcdef_secretsecretsecret"
	tests := []struct{ name, raw string }{
		{"control byte in the Authorization value",
			"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\x01\r\n\r\n"},
		{"request line without spaces",
			"GET/v1/models\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\r\n\r\n"},
		{"method with a bad byte",
			"G\x7fT /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\r\n\r\n"},
		{"HTTP version that is not one",
			"GET /v1/models HTTP/x\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\r\n\r\n"},
		{"header name with a control byte after the token",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\r\nBad\x01Key: v\r\n\r\n"},
		{"NUL in the request URI",
			"GET /v1/\x00models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\r\n\r\n"},
		{"API key, then a header without a colon",
			"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + apiKey + "\r\nnocolon\r\n\r\n"},
		{"empty request URI",
			"GET  HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer + "\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(conn, tt.raw); err != nil {
				t.Fatal(err)
			}
			var raw strings.Builder
			resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(conn, &raw)), nil)
			if err != nil {
				t.Fatalf("read answer: %v (got %q)", err, raw.String())
			}
			body := readBody(t, resp)
			for _, secret := range []string{bearer, apiKey, "SIGNATURE", "secretsecret", "c2VjcmV0"} {
				if strings.Contains(raw.String(), secret) {
					t.Fatalf("the answer echoes the credential:\n%s", raw.String())
				}
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != "invalid_request_error" ||
				!strings.HasPrefix(e.Error.Message, "malformed HTTP request") {
				t.Errorf("body %s is not the generic OpenAI-shaped 400 (%v)", body, err)
			}
		})
	}
	// A well-formed request on a fresh connection is still served.
	resp, err := httpClient.Get(r.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	if readBody(t, resp); resp.StatusCode != 200 {
		t.Errorf("healthz %d after the malformed requests", resp.StatusCode)
	}
}
