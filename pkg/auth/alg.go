package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"fmt"

	"github.com/golang-jwt/jwt/v5"
)

// alg is one supported signing algorithm; algSet is a bit set of them.
type (
	alg    uint8
	algSet uint8
)

const (
	algHS256 alg = iota
	algHS384
	algHS512
	algRS256
	algES256
	algEdDSA
	numAlgs
)

const (
	hmacAlgs = algSet(1<<algHS256 | 1<<algHS384 | 1<<algHS512)
	rsaAlgs  = algSet(1 << algRS256)
	ecAlgs   = algSet(1 << algES256)
	edAlgs   = algSet(1 << algEdDSA)
)

// minHMACSecret is the shortest HMAC secret accepted, in bytes: 256 bits,
// the output size of SHA-256 (RFC 7518 section 3.2).
const minHMACSecret = 32

// minRSABits is the smallest RSA modulus accepted (RFC 7518 section 3.3).
const minRSABits = 2048

// parseAlg maps a JOSE alg name to an alg; ok is false for anything this
// package does not support, "none" included.
func parseAlg(name string) (a alg, ok bool) {
	switch name {
	case "HS256":
		return algHS256, true
	case "HS384":
		return algHS384, true
	case "HS512":
		return algHS512, true
	case "RS256":
		return algRS256, true
	case "ES256":
		return algES256, true
	case "EdDSA":
		return algEdDSA, true
	}
	return 0, false
}

func (a alg) String() string {
	return [...]string{"HS256", "HS384", "HS512", "RS256", "ES256", "EdDSA"}[a]
}

func (a alg) method() jwt.SigningMethod {
	switch a {
	case algHS256:
		return jwt.SigningMethodHS256
	case algHS384:
		return jwt.SigningMethodHS384
	case algHS512:
		return jwt.SigningMethodHS512
	case algRS256:
		return jwt.SigningMethodRS256
	case algES256:
		return jwt.SigningMethodES256
	default:
		return jwt.SigningMethodEdDSA
	}
}

func (s algSet) has(a alg) bool { return s&(1<<a) != 0 }

// keyAlgs returns the algorithms a verification key of this type can check,
// or an error for an unsupported key type, curve or size. The type decides:
// only []byte verifies HS*, only *rsa.PublicKey RS256, only a P-256
// *ecdsa.PublicKey ES256 and only ed25519.PublicKey EdDSA, which is what
// keeps a public key from being used as an HMAC secret.
func keyAlgs(key any) (algSet, error) {
	switch k := key.(type) {
	case []byte:
		if len(k) < minHMACSecret {
			return 0, fmt.Errorf("hmac secret is shorter than %d bytes", minHMACSecret)
		}
		return hmacAlgs, nil
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return 0, fmt.Errorf("rsa key has %d bits, want at least %d", k.N.BitLen(), minRSABits)
		}
		return rsaAlgs, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return 0, fmt.Errorf("ecdsa curve %s is not supported, want P-256", k.Curve.Params().Name)
		}
		return ecAlgs, nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return 0, fmt.Errorf("ed25519 key has %d bytes", len(k))
		}
		return edAlgs, nil
	}
	return 0, fmt.Errorf("unsupported key type %T", key)
}
