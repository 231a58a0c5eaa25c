package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
)

// jwk holds the members of a JSON Web Key (RFC 7517) this package reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// loadJWKS reads a JWK Set file and returns its keys usable with the pinned
// algorithms (see parseJWKS). A malformed RSA, EC or OKP key is an error.
func loadJWKS(file string, pinned algSet) ([]verKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read jwks_file: %w", err)
	}
	keys, err := parseJWKS(b, pinned, false)
	if err != nil {
		return nil, fmt.Errorf("jwks_file %s: %w", file, err)
	}
	return keys, nil
}

// parseJWKS returns the keys of a JWK Set usable with the pinned algorithms.
// Keys for encryption (use other than "sig"), of other key types or curves,
// or whose alg is not pinned are skipped: a set published by an identity
// provider often holds such keys next to the signing ones. A malformed or
// too weak RSA, EC or OKP key is an error, or skipped when lenient (a
// fetched set: one odd key must not cost the issuer its good ones).
func parseJWKS(b []byte, pinned algSet, lenient bool) ([]verKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	var keys []verKey
	for i, k := range set.Keys {
		name := fmt.Sprintf("jwks key %d", i)
		if k.Kid != "" {
			name = fmt.Sprintf("jwks key %d (kid %q)", i, k.Kid)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		algs := pinned
		if k.Alg != "" {
			a, ok := parseAlg(k.Alg)
			if !ok || !pinned.has(a) {
				continue
			}
			algs = 1 << a
		}
		key, err := k.publicKey()
		if errors.Is(err, errSkipKey) {
			continue
		}
		var fits algSet
		if err == nil {
			fits, err = keyAlgs(key)
		}
		if err != nil {
			if lenient {
				continue
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if fits&algs == 0 {
			continue
		}
		keys = append(keys, verKey{kid: k.Kid, key: key, algs: fits & algs, name: name})
	}
	return keys, nil
}

// errSkipKey marks a JWK of a type this package does not verify with.
var errSkipKey = errors.New("unsupported key type")

func (k jwk) publicKey() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64Field("n", k.N)
		if err != nil {
			return nil, err
		}
		e, err := b64Field("e", k.E)
		if err != nil {
			return nil, err
		}
		if len(e) > 4 {
			return nil, errors.New("rsa exponent is too large")
		}
		exp := int(new(big.Int).SetBytes(e).Int64())
		if exp < 3 || exp%2 == 0 {
			return nil, fmt.Errorf("rsa exponent %d is invalid", exp)
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, errSkipKey
		}
		x, err := b64Field("x", k.X)
		if err != nil {
			return nil, err
		}
		y, err := b64Field("y", k.Y)
		if err != nil {
			return nil, err
		}
		if len(x) != 32 || len(y) != 32 {
			return nil, errors.New("ec coordinates must be 32 bytes each")
		}
		point := append(append([]byte{4}, x...), y...)
		key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
		if err != nil {
			return nil, fmt.Errorf("ec point: %w", err)
		}
		return key, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, errSkipKey
		}
		x, err := b64Field("x", k.X)
		if err != nil {
			return nil, err
		}
		if len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("ed25519 key must be %d bytes", ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, errSkipKey
}

func b64Field(name, v string) ([]byte, error) {
	if v == "" {
		return nil, fmt.Errorf("member %q is missing", name)
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("member %q: %w", name, err)
	}
	return b, nil
}
