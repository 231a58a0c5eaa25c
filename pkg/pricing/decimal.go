package pricing

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// NanoPerUSD is the number of nano-USD in one US dollar.
const NanoPerUSD = 1_000_000_000

// errSyntax is wrapped by ParseUSD for text that is not a plain decimal.
var errSyntax = errors.New("not a non-negative decimal with at most 9 fractional digits")

// ParseUSD parses a non-negative decimal amount of US dollars such as "2.50",
// "0.075" or "250" into nano-USD, exactly and without floating point:
// "2.50" is 2_500_000_000. It accepts digits with an optional fraction of 1
// to 9 digits; it rejects signs, exponents, spaces, underscores, more than
// nine fractional digits and amounts above math.MaxInt64 nano-USD.
func ParseUSD(s string) (int64, error) {
	whole, frac, dot := s, "", false
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			whole, frac, dot = s[:i], s[i+1:], true
			break
		}
	}
	if whole == "" || (dot && frac == "") || len(frac) > 9 || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("parse usd %q: %w", s, errSyntax)
	}
	var n uint64
	for i := 0; i < len(whole); i++ {
		d := uint64(whole[i] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, fmt.Errorf("parse usd %q: %w", s, strconv.ErrRange)
		}
		n = n*10 + d
	}
	if n > math.MaxInt64/NanoPerUSD {
		return 0, fmt.Errorf("parse usd %q: %w", s, strconv.ErrRange)
	}
	n *= NanoPerUSD
	scale := uint64(NanoPerUSD / 10)
	for i := 0; i < len(frac); i++ {
		n += uint64(frac[i]-'0') * scale
		scale /= 10
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("parse usd %q: %w", s, strconv.ErrRange)
	}
	return int64(n), nil
}

// digits reports whether s holds only ASCII digits (true for "").
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatUSD formats nano-USD as an exact decimal dollar amount with at least
// two and at most nine fractional digits: 2_500_000_000 is "2.50", 75 is
// "0.000000075". ParseUSD reads the result back to the same value for
// non-negative amounts.
func FormatUSD(nano int64) string {
	var buf [32]byte
	i := len(buf)
	u := uint64(nano)
	if nano < 0 {
		u = -u
	}
	whole, frac := u/NanoPerUSD, u%NanoPerUSD
	n := 9
	for n > 2 && frac%10 == 0 {
		frac /= 10
		n--
	}
	for ; n > 0; n-- {
		i--
		buf[i] = byte('0' + frac%10)
		frac /= 10
	}
	i--
	buf[i] = '.'
	for {
		i--
		buf[i] = byte('0' + whole%10)
		whole /= 10
		if whole == 0 {
			break
		}
	}
	if nano < 0 {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}
