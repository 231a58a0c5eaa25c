// Package apikey issues and verifies opaque API keys, for callers that
// cannot obtain a JWT (batch jobs, vendor tools, notebooks).
//
// A key is "tg-" + a 16-hex-digit public id + "_" + a 43-character
// base64url secret (256 random bits from crypto/rand). The id names the
// record in the NATS KV bucket Bucket; the record holds the principal the
// key stands for (the fields a JWT carries), its name, who created it and
// when, and the SHA-256 of the secret. The secret itself is returned once,
// by Create or Rotate, and stored nowhere.
//
// Invariants:
//   - A fast hash is enough: the secret is 256 uniformly random bits, so
//     there is no dictionary to try and a brute-force search of 2^256
//     preimages is out of reach at any hash rate. A slow KDF (bcrypt,
//     argon2) protects low-entropy passwords; here it would only put
//     milliseconds on every request.
//   - Verification reads memory only: a Watcher keeps every record from a
//     KV watch (initial values, then puts and deletes) and Verify looks the
//     id up in an immutable snapshot, compares the hash in constant time
//     and allocates nothing.
//   - A revoked key keeps its record (RevokedAt set), so the gateway can
//     answer key_revoked to a holder of the right secret; a wrong secret
//     for any id, revoked or not, reads as an unknown key.
//   - Every change goes through one function: Store.Create, Store.Rotate,
//     Store.Revoke.
package apikey
