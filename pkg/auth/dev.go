package auth

import (
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// DevIssuer is the issuer name whose HMAC key mints the development token
// of the gateway's start-up banner.
const DevIssuer = "dev"

// PublicDevSecret is the HS256 secret the shipped development configs
// fall back to when TOLLGATE_DEV_SECRET is not set. It is published with
// the source, so anyone can mint tokens a gateway using it accepts.
const PublicDevSecret = "tollgate-dev-secret-do-not-use-in-production"

// UsesPublicDevSecret reports whether an issuer of a verifies with
// PublicDevSecret.
func UsesPublicDevSecret(a config.Auth) bool {
	for _, is := range a.Issuers {
		for _, k := range is.Keys {
			if k.Secret == PublicDevSecret {
				return true
			}
		}
	}
	return false
}

// DevToken mints a 24-hour token (subject dev-user, dept and team dev,
// project playground) with the first HMAC secret of the issuer named
// DevIssuer, or returns "" when there is none.
func DevToken(a config.Auth, now time.Time) string {
	for _, is := range a.Issuers {
		if is.Name != DevIssuer {
			continue
		}
		for _, k := range is.Keys {
			if k.Secret == "" {
				continue
			}
			tok, err := Mint(MintOptions{
				Issuer: is.Issuer, Audience: is.Audience, Subject: "dev-user", Dept: "dev", Team: "dev",
				Project: "playground", TTL: 24 * time.Hour, KID: k.KID, Key: []byte(k.Secret), Claims: is.Claims,
				Alg: is.Algorithms[0],
			}, now)
			if err == nil {
				return tok
			}
		}
	}
	return ""
}
