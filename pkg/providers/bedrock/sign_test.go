package bedrock

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// vectorTime is the date of the AWS SigV4 test suite.
var vectorTime = time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)

const vectorSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

// TestSignerVectors checks the signer and this file's independent verifier
// against the AWS SigV4 test suite's get-vanilla and post-vanilla cases.
func TestSignerVectors(t *testing.T) {
	s := newSigner("us-east-1", "AKIDEXAMPLE", vectorSecret, "")
	s.service = "service"
	const empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	tests := []struct{ method, signature string }{
		{http.MethodGet, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
		{http.MethodPost, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			hr, err := http.NewRequest(tc.method, "https://example.amazonaws.com/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.sign(hr, empty, vectorTime); err != nil {
				t.Fatal(err)
			}
			want := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + tc.signature
			if got := hr.Header.Get("Authorization"); got != want {
				t.Errorf("authorization\n got %s\nwant %s", got, want)
			}
			got := expectedSignature(tc.method, "/", map[string]string{"host": "example.amazonaws.com", "x-amz-date": "20150830T123600Z"},
				"host;x-amz-date", empty, vectorSecret, "us-east-1", "service", vectorTime)
			if got != tc.signature {
				t.Errorf("verifier signature %s, want %s", got, tc.signature)
			}
		})
	}
}

// TestSignatureOnTheWire sends built requests to a loopback server and
// verifies, from the bytes it received, that the signature covers exactly
// what fasthttp sent: method, escaped path, host, signed headers, body.
func TestSignatureOnTheWire(t *testing.T) {
	type seen struct {
		method, uri string
		headers     map[string]string
		body        []byte
	}
	got := make(chan seen, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{DisablePreParseMultipartForm: true, Handler: func(ctx *fasthttp.RequestCtx) {
		h := map[string]string{"host": string(ctx.Host())}
		for k, v := range ctx.Request.Header.All() {
			h[strings.ToLower(string(k))] = string(v)
		}
		got <- seen{string(ctx.Method()), string(ctx.Request.Header.RequestURI()), h, append([]byte(nil), ctx.PostBody()...)}
	}}
	go srv.Serve(ln) //nolint:errcheck // ends with Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	// As the gateway's: a normalizing client would unescape the model id.
	hc := &fasthttp.HostClient{Addr: ln.Addr().String(), DisablePathNormalizing: true}

	tests := []struct {
		name, model, token string
		stream             bool
		headers            map[string]string
	}{
		{"model id with colon", "anthropic.claude-3-haiku-20240307-v1:0", "", false, nil},
		{"arn, session token, static header", "arn:aws:bedrock:us-east-1:1:inference-profile/us.meta.llama3", "FwoGZXIvYXdzEJr//token", true,
			map[string]string{"X-Amzn-Bedrock-Trace": "ENABLED"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Options{Name: "w", BaseURL: "http://" + ln.Addr().String(), Region: "eu-central-1",
				AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: vectorSecret, SessionToken: tc.token, Headers: tc.headers,
				Now: func() time.Time { return vectorTime }})
			if err != nil {
				t.Fatal(err)
			}
			c := chatCall(`{"messages":[{"role":"user","content":"hi there"}],"max_tokens":10}`)
			c.Model, c.Stream = tc.model, tc.stream
			var req fasthttp.Request
			var resp fasthttp.Response
			if err := p.Build(&req, c); err != nil {
				t.Fatal(err)
			}
			if err := hc.Do(&req, &resp); err != nil {
				t.Fatal(err)
			}
			s := <-got
			auth := s.headers["authorization"]
			_, signedList, _ := strings.Cut(auth, "SignedHeaders=")
			signedList, sig, _ := strings.Cut(signedList, ", Signature=")
			sum := sha256.Sum256(s.body)
			want := expectedSignature(s.method, s.uri, s.headers, signedList, hex.EncodeToString(sum[:]),
				vectorSecret, "eu-central-1", "bedrock", vectorTime)
			if sig != want {
				t.Errorf("signature %s does not verify (want %s); request %+v", sig, want, s)
			}
			if tc.token != "" && s.headers["x-amz-security-token"] != tc.token {
				t.Errorf("security token %q", s.headers["x-amz-security-token"])
			}
			for _, h := range []string{"host", "content-type", "content-length", "x-amz-date"} {
				if !strings.Contains(";"+signedList+";", ";"+h+";") {
					t.Errorf("%s is not signed: %s", h, signedList)
				}
			}
			for k := range tc.headers {
				if !strings.Contains(signedList, strings.ToLower(k)) {
					t.Errorf("static header %s is not signed", k)
				}
			}
		})
	}
}

// TestSignatureStable signs the same request twice with a fixed clock:
// the signatures match, and change with the body.
func TestSignatureStable(t *testing.T) {
	p := testProvider(t, "")
	sign := func(body string) string {
		var req fasthttp.Request
		if err := p.Build(&req, chatCall(body)); err != nil {
			t.Fatal(err)
		}
		return string(req.Header.Peek("Authorization"))
	}
	a := sign(`{"messages":[{"role":"user","content":"a"}]}`)
	if b := sign(`{"messages":[{"role":"user","content":"a"}]}`); a != b {
		t.Errorf("unstable signature:\n%s\n%s", a, b)
	}
	if c := sign(`{"messages":[{"role":"user","content":"b"}]}`); a == c {
		t.Error("the signature does not cover the body")
	}
}

// expectedSignature computes a SigV4 signature from scratch (independently
// of the AWS SDK) for a request as received: uri is the escaped request
// path, headers are lowercase, signed is the SignedHeaders list.
func expectedSignature(method, uri string, headers map[string]string, signed, payloadHash, secret, region, service string, t time.Time) string {
	var canon strings.Builder
	canon.WriteString(method + "\n")
	// Non-S3 services sign the path escaped once more.
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			canon.WriteByte(c)
		} else {
			canon.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
		}
	}
	canon.WriteString("\n\n")
	names := strings.Split(signed, ";")
	sort.Strings(names)
	for _, n := range names {
		canon.WriteString(n + ":" + strings.Join(strings.Fields(headers[n]), " ") + "\n")
	}
	canon.WriteString("\n" + signed + "\n" + payloadHash)
	day := t.Format("20060102")
	scope := day + "/" + region + "/" + service + "/aws4_request"
	h := sha256.Sum256([]byte(canon.String()))
	toSign := "AWS4-HMAC-SHA256\n" + t.Format("20060102T150405Z") + "\n" + scope + "\n" + hex.EncodeToString(h[:])
	mac := func(key []byte, data string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(data))
		return m.Sum(nil)
	}
	k := mac([]byte("AWS4"+secret), day)
	k = mac(k, region)
	k = mac(k, service)
	k = mac(k, "aws4_request")
	return hex.EncodeToString(mac(k, toSign))
}
