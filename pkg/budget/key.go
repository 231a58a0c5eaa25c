package budget

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// TotalID identifies one spend total: a scope value over one period.
//
// In the KV bucket its key is four dot-separated tokens,
//
//	<scope>.<value>.<period>.<period_start>
//
// for example dept.finance.month.2026-11, team.ml.day.2026-11-30,
// key.k=2E1.total._ and global._.total._. The value token is the value with
// every byte outside [A-Za-z0-9_-] written as "=" and two uppercase hex
// digits ("." is "=2E", "=" is "=3D", "é" is "=C3=A9"), so any value maps to
// valid KV key characters and back. Scope global always has the value token
// "_"; a total-period key has the period_start token "_"; days are
// YYYY-MM-DD and months YYYY-MM, in UTC.
type TotalID struct {
	Scope Scope
	// Value is the scope value; always "" for ScopeGlobal.
	Value  string
	Period Period
	// Start numbers the period: days since 1970-01-01 for PeriodDay, months
	// since year 0 (year*12 + month-1) for PeriodMonth, 0 for PeriodTotal.
	Start int32
}

const nsPerDay = int64(24 * time.Hour)

// periodStart returns the Start of the period p containing the instant ts
// (unix ns, UTC).
func periodStart(p Period, ts int64) int32 {
	switch p {
	case PeriodDay:
		d := ts / nsPerDay
		if ts%nsPerDay < 0 {
			d--
		}
		return int32(d)
	case PeriodMonth:
		y, m, _ := time.Unix(0, ts).UTC().Date()
		return int32(y*12 + int(m) - 1)
	}
	return 0
}

// periodStarts returns the Start of every period at ts, indexed by Period.
func periodStarts(ts int64) [numPeriods]int32 {
	return [numPeriods]int32{periodStart(PeriodDay, ts), periodStart(PeriodMonth, ts), 0}
}

// PeriodStart formats the start of the total's period as stored in
// SpendTotal.period_start: "2026-11-30", "2026-11", or "" for total.
func (id TotalID) PeriodStart() string {
	switch id.Period {
	case PeriodDay:
		return time.Unix(int64(id.Start)*86400, 0).UTC().Format(time.DateOnly)
	case PeriodMonth:
		y, m := id.Start/12, id.Start%12+1
		return fmt.Sprintf("%04d-%02d", y, m)
	}
	return ""
}

// Key returns the KV key of the total.
func (id TotalID) Key() string {
	var b strings.Builder
	b.Grow(len(id.Value) + 32)
	b.WriteString(id.Scope.String())
	b.WriteByte('.')
	if id.Scope == ScopeGlobal {
		b.WriteByte('_')
	} else {
		escapeValue(&b, id.Value)
	}
	b.WriteByte('.')
	b.WriteString(id.Period.String())
	b.WriteByte('.')
	if id.Period == PeriodTotal {
		b.WriteByte('_')
	} else {
		b.WriteString(id.PeriodStart())
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func escapeValue(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if plainByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}

var errKey = errors.New("not a spend total key")

func unescapeValue(tok string) (string, error) {
	if strings.IndexByte(tok, '=') < 0 {
		for i := 0; i < len(tok); i++ {
			if !plainByte(tok[i]) {
				return "", errKey
			}
		}
		return tok, nil
	}
	out := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case plainByte(c):
			out = append(out, c)
		case c == '=' && i+2 < len(tok) && isUpperHex(tok[i+1]) && isUpperHex(tok[i+2]):
			d := unhex(tok[i+1])<<4 | unhex(tok[i+2])
			if plainByte(d) {
				return "", errKey // not canonical: one value, one key
			}
			out = append(out, d)
			i += 2
		default:
			return "", errKey
		}
	}
	return string(out), nil
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// ParseKey parses a KV key written by TotalID.Key.
func ParseKey(key string) (TotalID, error) {
	var id TotalID
	toks := strings.Split(key, ".")
	if len(toks) != 4 {
		return id, fmt.Errorf("parse key %q: %w", key, errKey)
	}
	var err error
	if id.Scope, err = ParseScope(toks[0]); err != nil {
		return id, fmt.Errorf("parse key %q: %w", key, err)
	}
	if id.Period, err = ParsePeriod(toks[2]); err != nil {
		return id, fmt.Errorf("parse key %q: %w", key, err)
	}
	if id.Scope == ScopeGlobal {
		if toks[1] != "_" {
			return id, fmt.Errorf("parse key %q: %w", key, errKey)
		}
	} else if id.Value, err = unescapeValue(toks[1]); err != nil || id.Value == "" {
		return id, fmt.Errorf("parse key %q: %w", key, errKey)
	}
	if id.Start, err = parseStart(id.Period, toks[3]); err != nil {
		return id, fmt.Errorf("parse key %q: %w", key, err)
	}
	return id, nil
}

// parseStart parses a period_start key token.
func parseStart(p Period, tok string) (int32, error) {
	switch p {
	case PeriodDay:
		t, err := time.Parse(time.DateOnly, tok)
		if err != nil {
			return 0, err
		}
		return int32(t.Unix() / 86400), nil
	case PeriodMonth:
		t, err := time.Parse("2006-01", tok)
		if err != nil {
			return 0, err
		}
		return int32(t.Year()*12 + int(t.Month()) - 1), nil
	}
	if tok != "_" {
		return 0, errKey
	}
	return 0, nil
}
