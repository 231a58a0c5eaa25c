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

// Qualify returns the total value of a team or project named name in the
// department dept: "research/ml". Team and project totals and limits are
// qualified so that team ml of research and team ml of finance are two
// totals (issue #13). A token without a department gives "/ml"; an empty
// name gives "" (no total). In the department part "%", "/" and "*" are
// written "%25", "%2F" and "%2A", so the first "/" always ends the
// department and the name after it is kept as is ("a%2Fb/c" is team c of
// department a/b; "a/b/c" is team b/c of department a). The KV key escapes
// the whole value again (TotalID.Key).
func Qualify(dept, name string) string {
	if name == "" {
		return ""
	}
	if strings.IndexAny(dept, "%/*") < 0 {
		return dept + "/" + name
	}
	var b strings.Builder
	b.Grow(len(dept) + len(name) + 8)
	for i := 0; i < len(dept); i++ {
		switch c := dept[i]; c {
		case '%', '/', '*':
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('/')
	b.WriteString(name)
	return b.String()
}

// SplitQualified returns the department and name of a value made by
// Qualify, and false for a value without "/" (a flat team or project total
// written before values were qualified) or with a malformed department.
func SplitQualified(v string) (dept, name string, ok bool) {
	d, name, ok := strings.Cut(v, "/")
	switch {
	case !ok || name == "" || strings.IndexByte(d, '*') >= 0:
		return "", "", false
	case strings.IndexByte(d, '%') < 0:
		return d, name, true
	}
	out := make([]byte, 0, len(d))
	for i := 0; i < len(d); i++ {
		c := d[i]
		switch {
		case c != '%':
			out = append(out, c)
		case strings.HasPrefix(d[i+1:], "25"):
			out, i = append(out, '%'), i+2
		case strings.HasPrefix(d[i+1:], "2F"):
			out, i = append(out, '/'), i+2
		case strings.HasPrefix(d[i+1:], "2A"):
			out, i = append(out, '*'), i+2
		default:
			return "", "", false
		}
	}
	return string(out), name, true
}

// qualifiedName returns the name part of a qualified value (after the
// first "/"), without allocating; "" when v has none.
func qualifiedName(v string) string {
	if i := strings.IndexByte(v, '/'); i >= 0 {
		return v[i+1:]
	}
	return ""
}

// ScopeValues returns the value of every scope of a request or usage event
// by the principal's fields, indexed by Scope: team and project qualified
// by the department (Qualify), the others as they are, "" for global. It
// makes one allocation when there are both a team and a project (both
// values share one string), at most two otherwise.
func ScopeValues(key, subject, dept, team, project string) [NumScopes]string {
	var v [NumScopes]string
	v[ScopeKey], v[ScopeSubject], v[ScopeDept] = key, subject, dept
	if team != "" && project != "" && strings.IndexAny(dept, "%/*") < 0 {
		both := dept + "/" + team + dept + "/" + project
		n := len(dept) + 1 + len(team)
		v[ScopeTeam], v[ScopeProject] = both[:n], both[n:]
		return v
	}
	v[ScopeTeam], v[ScopeProject] = Qualify(dept, team), Qualify(dept, project)
	return v
}

// NewScopes returns the Scopes a request of this principal is accounted
// under (ScopeValues).
func NewScopes(key, subject, dept, team, project string) Scopes {
	v := ScopeValues(key, subject, dept, team, project)
	return Scopes{Key: v[ScopeKey], Subject: v[ScopeSubject], Dept: v[ScopeDept], Team: v[ScopeTeam], Project: v[ScopeProject]}
}

// PeriodStarts returns the Start of the day, month and total periods
// containing ts (unix ns), indexed by Period: the totals an event of that
// timestamp counts towards.
func PeriodStarts(ts int64) [NumPeriods]int32 { return periodStarts(ts) }
