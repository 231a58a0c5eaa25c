package usage

import (
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// NewEventID returns a UUIDv7 (RFC 9562) for an event at t: 48 bits of
// unix milliseconds, then random bits, so ids sort by time and are unique
// without coordination. The random bits come from the runtime's per-thread
// generator, so no lock is shared between requests.
func NewEventID(t time.Time) string {
	var u [16]byte
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	a, b := rand.Uint64(), rand.Uint64()
	for i := 0; i < 2; i++ {
		u[6+i] = byte(a >> (8 * i))
	}
	for i := 0; i < 8; i++ {
		u[8+i] = byte(b >> (8 * i))
	}
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // variant 10
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
