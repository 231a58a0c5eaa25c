package auth

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/tollgate/tollgate/pkg/config"
)

// verKey is one verification key of an issuer.
type verKey struct {
	// kid is the key id; empty when the key has none.
	kid string
	// key is []byte, *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey,
	// stored as an interface once so handing it to jwt does not allocate.
	key any
	// algs are the algorithms the key may verify: those its type fits,
	// narrowed to the issuer's pinned ones (and to a JWK's alg).
	algs algSet
	// name says where the key came from, for config errors.
	name string
}

// loadKey reads one configured key and checks it fits the pinned algorithms.
func loadKey(i int, k config.Key, pinned algSet) (verKey, error) {
	name := fmt.Sprintf("key %d", i)
	if k.KID != "" {
		name = fmt.Sprintf("key %d (kid %q)", i, k.KID)
	}
	key, err := readKey(k)
	if err != nil {
		return verKey{}, fmt.Errorf("%s: %w", name, err)
	}
	algs, err := keyAlgs(key)
	if err != nil {
		return verKey{}, fmt.Errorf("%s: %w", name, err)
	}
	if algs&pinned == 0 {
		return verKey{}, fmt.Errorf("%s: %s key fits none of the issuer's algorithms", name, keyKind(algs))
	}
	return verKey{kid: k.KID, key: key, algs: algs & pinned, name: name}, nil
}

// readKey returns the key material of k from the one source that is set.
func readKey(k config.Key) (any, error) {
	n := 0
	for _, s := range []string{k.Secret, k.SecretFile, k.PublicKey, k.PublicKeyFile} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("set exactly one of secret, secret_file, public_key, public_key_file")
	}
	switch {
	case k.Secret != "":
		return []byte(k.Secret), nil
	case k.SecretFile != "":
		b, err := os.ReadFile(k.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("read secret_file: %w", err)
		}
		// Editors and `echo` end files with a newline that is not part of
		// the secret.
		return bytes.TrimRight(b, "\r\n"), nil
	case k.PublicKey != "":
		key, err := parsePublicKeyPEM([]byte(k.PublicKey))
		if err != nil {
			return nil, fmt.Errorf("public_key: %w", err)
		}
		return key, nil
	default:
		b, err := os.ReadFile(k.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read public_key_file: %w", err)
		}
		key, err := parsePublicKeyPEM(b)
		if err != nil {
			return nil, fmt.Errorf("public_key_file %s: %w", k.PublicKeyFile, err)
		}
		return key, nil
	}
}

// parsePublicKeyPEM parses the first PEM block of b: a PKIX "PUBLIC KEY",
// a PKCS #1 "RSA PUBLIC KEY" or a "CERTIFICATE" whose public key is used.
func parsePublicKeyPEM(b []byte) (any, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	switch block.Type {
	case "PUBLIC KEY":
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		}
		return key, nil
	case "RSA PUBLIC KEY":
		key, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse rsa public key: %w", err)
		}
		return key, nil
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		return cert.PublicKey, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a public key", block.Type)
}

func keyKind(algs algSet) string {
	switch {
	case algs&hmacAlgs != 0:
		return "hmac"
	case algs&rsaAlgs != 0:
		return "rsa"
	case algs&ecAlgs != 0:
		return "ecdsa"
	default:
		return "ed25519"
	}
}
