package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// testKeys are generated once per test binary: RSA generation is slow on
// a shared machine.
type testKeys struct {
	secret, secret2 []byte
	rsa, rsa2       *rsa.PrivateKey
	ec, ec2         *ecdsa.PrivateKey
	ed, ed2         ed25519.PrivateKey
}

var genTestKeys = sync.OnceValue(func() *testKeys {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	// The secrets are random text, as an operator's secret_file holds:
	// random bytes end in '\r' or '\n' about once in 128 runs, which the
	// secret_file reader trims, leaving a 31-byte secret the verifier refuses.
	k := &testKeys{secret: randomText(32), secret2: randomText(64)}
	var err error
	k.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	k.ec2, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	_, k.ed, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	_, k.ed2, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	return k
})

// randomText returns n random characters of the base64url alphabet.
func randomText(n int) []byte {
	b := make([]byte, n*3/4+1)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return []byte(base64.RawURLEncoding.EncodeToString(b)[:n])
}

// pubPEM encodes a public key as a PKIX PEM block.
func pubPEM(t testing.TB, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// writeFile writes data to name in dir and returns the path.
func writeFile(t testing.TB, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwkOf returns the JWK of a public key with the given kid.
func jwkOf(t testing.TB, kid string, pub any) map[string]string {
	t.Helper()
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "n": b64(k.N.Bytes()),
			"e": b64([]byte{1, 0, 1})}
	case *ecdsa.PublicKey:
		b, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(b[1:33]), "y": b64(b[33:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64(k)}
	}
	t.Fatalf("no jwk for %T", pub)
	return nil
}

// writeJWKS writes a JWK Set file of keys into dir and returns its path.
func writeJWKS(t testing.TB, dir string, keys ...map[string]string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "jwks.json", string(b))
}
