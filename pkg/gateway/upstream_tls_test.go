package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
)

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "mock upstream"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// stalledListener accepts connections and never says a word on them.
func stalledListener(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestTLSUpstream: an https provider is dialed and handshaken by the
// gateway's dialer, within timeouts.connect, and the connection it hands
// fasthttp still carries the relay's per-read deadlines. A handshake that
// never completes is a connect failure, so fallback_on: [connect] moves on
// at once, as it does for a refused connection (it used to hang until the
// total timeout).
func TestTLSUpstream(t *testing.T) {
	cert, pool := selfSigned(t)
	mock := mockllm.New(mockllm.Config{})
	ln := tls.NewListener(listen(t), &tls.Config{Certificates: []tls.Certificate{cert}})
	go func() { _ = mock.Serve(ln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	secure := "https://" + ln.Addr().String() + "/v1"
	plain := newRig(t, nil)

	r := newRigFor(t, mock, secure, func(c *config.Config) {
		c.Providers[0].Timeouts.FirstByte, c.Providers[0].Timeouts.Idle, c.Providers[0].Timeouts.Total = 20*time.Second, 300*time.Millisecond, 30*time.Second
		addProvider(c, "stalled", "https://"+stalledListener(t)+"/v1")
		c.Providers[len(c.Providers)-1].Timeouts.Connect = 200 * time.Millisecond
		addProvider(c, "plain", plain.cfg.Providers[0].BaseURL)
		c.Models = append(c.Models, config.Model{Name: "primary", Targets: []config.Target{{Provider: "stalled", Model: "x"}},
			Fallbacks: []string{"backup"}, FallbackOn: []string{config.TriggerConnect}},
			config.Model{Name: "backup", Targets: []config.Target{{Provider: "plain", Model: "mock-gpt"}}})
		c.ApplyDefaults()
	})
	for _, up := range r.gw.state.Load().ups {
		if up.dial.tls != nil {
			up.dial.tls.RootCAs = pool
		}
	}

	t.Run("unary", func(t *testing.T) {
		resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}`)
		body := readBody(t, resp)
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"completion_tokens"`) {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("stream idle deadline", func(t *testing.T) {
		resp := r.post("/v1/chat/completions", r.token(nil), streamBody(`{"chunks":3,"chunk_delay_ms":1200}`))
		chunks, done := decodeChunks(t, readEvents(t, resp.Body))
		resp.Body.Close()
		if resp.StatusCode != 200 || done || len(chunks) == 0 {
			t.Fatalf("status %d, done %v, %d chunks: want a stream ended by an error event", resp.StatusCode, done, len(chunks))
		}
		if last := chunks[len(chunks)-1]; last.Error == nil || last.Error.Code != "upstream_timeout" {
			t.Fatalf("last event %+v, want the idle timeout's upstream_timeout", last)
		}
	})
	t.Run("stalled handshake is a connect failure", func(t *testing.T) {
		resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`)
		body := readBody(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("X-Tollgate-Provider") != "plain" || resp.Header.Get("X-Tollgate-Attempts") != "2" {
			t.Fatalf("status %d, provider %q, attempts %q: %s", resp.StatusCode, resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Attempts"), body)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		r2 := newRigFor(t, mock, secure, nil) // the system roots do not know the mock
		resp := r2.post("/v1/chat/completions", r2.token(nil), `{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}`)
		body := readBody(t, resp)
		if resp.StatusCode != 502 || !strings.Contains(string(body), "tls handshake") || !strings.Contains(string(body), "upstream_error") {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
}
