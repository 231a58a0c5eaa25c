package budget

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// NanoPerUSD is the number of nano-USD in one US dollar.
const NanoPerUSD = 1_000_000_000

// Scope is what a spend total is grouped by. The order is the hierarchy,
// from the widest (global) to the narrowest (key).
type Scope uint8

// The scopes, widest first.
const (
	ScopeGlobal Scope = iota
	ScopeDept
	ScopeTeam
	ScopeProject
	ScopeSubject
	ScopeKey
	numScopes
)

// NumScopes is the number of scopes, for arrays indexed by Scope.
const NumScopes = int(numScopes)

var scopeNames = [numScopes]string{"global", "dept", "team", "project", "subject", "key"}

// String returns the scope's config name: global, dept, team, project,
// subject or key.
func (s Scope) String() string {
	if s < numScopes {
		return scopeNames[s]
	}
	return "scope(" + strconv.Itoa(int(s)) + ")"
}

// ParseScope returns the scope named s.
func ParseScope(s string) (Scope, error) {
	for i, n := range scopeNames {
		if n == s {
			return Scope(i), nil
		}
	}
	return 0, fmt.Errorf("unknown budget scope %q (want global, dept, team, project, subject or key)", s)
}

// Period is the time window a spend total covers.
type Period uint8

// The periods. Day and month are UTC calendar periods.
const (
	PeriodDay Period = iota
	PeriodMonth
	PeriodTotal
	numPeriods
)

// NumPeriods is the number of periods, for arrays indexed by Period.
const NumPeriods = int(numPeriods)

var periodNames = [numPeriods]string{"day", "month", "total"}

// String returns the period's config name: day, month or total.
func (p Period) String() string {
	if p < numPeriods {
		return periodNames[p]
	}
	return "period(" + strconv.Itoa(int(p)) + ")"
}

// ParsePeriod returns the period named s.
func ParsePeriod(s string) (Period, error) {
	for i, n := range periodNames {
		if n == s {
			return Period(i), nil
		}
	}
	return 0, fmt.Errorf("unknown budget period %q (want day, month or total)", s)
}

// Star is the Limit value that applies to each value of its scope separately.
const Star = "*"

// Limit is one parsed spend limit.
type Limit struct {
	Scope Scope
	// Value is the scope value the limit applies to, or Star for each value
	// separately. It is always "" for ScopeGlobal.
	Value  string
	Period Period
	// AmountNano is the limit in nano-USD.
	AmountNano int64
}

// String formats the limit for logs and errors: "dept finance month 250.000000000 USD".
func (l Limit) String() string {
	v := l.Value
	if l.Scope == ScopeGlobal {
		v = "-"
	}
	return fmt.Sprintf("%s %s %s %s USD", l.Scope, v, l.Period, formatUSD(l.AmountNano))
}

// appliesTo returns the value of l's scope in s that l limits, and whether l
// applies to s at all.
func (l *Limit) appliesTo(s *Scopes) (string, bool) {
	if l.Scope == ScopeGlobal {
		return "", true
	}
	v := s.Value(l.Scope)
	if v == "" || !l.Matches(v) {
		return "", false
	}
	return v, true
}

// Matches reports whether l limits the total of value v of its scope:
// Star matches every value, "*/ml" (team and project) every value named ml
// in any department (research/ml, finance/ml), any other value only
// itself. A global limit matches everything.
func (l *Limit) Matches(v string) bool {
	switch {
	case l.Scope == ScopeGlobal || l.Value == Star:
		return true
	case l.anyDept():
		return qualifiedName(v) == l.Value[2:]
	}
	return l.Value == v
}

// anyDept reports a "*/name" limit of team or project: one name in every
// department, each department's total separately. (Dept, subject and key
// values are not qualified, so there "*/x" is a plain value.)
func (l *Limit) anyDept() bool {
	return (l.Scope == ScopeTeam || l.Scope == ScopeProject) &&
		len(l.Value) > 2 && l.Value[0] == '*' && l.Value[1] == '/'
}

// perValue reports whether l applies to many values, each separately (Star
// or "*/name"), rather than to one total.
func (l *Limit) perValue() bool { return l.Value == Star || l.anyDept() }

// ParseLimits validates the budgets section of the config and converts it.
// Scope must be one of global, dept, team, project, subject or key. Value is
// required except for global (where it is ignored); "*" means each value
// separately. Team and project values name their department
// (config.CheckLimitValue): "research/ml", "*/ml" (ml of every department,
// each separately) or "*"; a bare "ml" is an error. AmountUSD is a
// non-negative decimal with at most nine fractional digits, parsed exactly
// ("0" refuses every request). Period defaults to month. Two limits on the
// same scope, value and period are an error.
func ParseLimits(cfg []config.BudgetLimit) ([]Limit, error) {
	out := make([]Limit, 0, len(cfg))
	seen := make(map[Limit]bool, len(cfg))
	for i, c := range cfg {
		l, err := parseLimit(c.Scope, c.Value, c.Period)
		if err == nil {
			l.AmountNano, err = parseUSD(c.AmountUSD)
		}
		if err != nil {
			return nil, fmt.Errorf("budgets[%d]: %w", i, err)
		}
		key := l
		key.AmountNano = 0
		if seen[key] {
			return nil, fmt.Errorf("budgets[%d]: duplicate limit for %s %q %s", i, l.Scope, l.Value, l.Period)
		}
		seen[key] = true
		out = append(out, l)
	}
	return out, nil
}

// parseLimit checks and converts everything but the amount.
func parseLimit(scope, value, period string) (Limit, error) {
	var l Limit
	var err error
	if l.Scope, err = ParseScope(scope); err != nil {
		return l, err
	}
	if period == "" {
		period = "month"
	}
	if l.Period, err = ParsePeriod(period); err != nil {
		return l, err
	}
	switch {
	case l.Scope == ScopeGlobal:
		l.Value = ""
	case value == "":
		return l, fmt.Errorf("budget scope %s needs a value (or %q for each value)", l.Scope, Star)
	default:
		if err := config.CheckLimitValue(l.Scope.String(), value); err != nil {
			return l, err
		}
		l.Value = value
	}
	return l, nil
}

// FromClaims converts the budgets signed into a token. A claim's value ""
// or "*" means the principal's own value of that scope. A team or project
// claim may name its department ("research/ml", "*/ml", as in config); a
// bare "ml", as tokens minted before values were qualified carry, is read
// as "*/ml": the holder has one department, so it limits the holder's own
// team ml (research/ml for a holder of research), never another
// department's. AmountUSD is converted to nano-USD through its decimal
// form rounded to nine fractional digits (strconv.FormatFloat(v, 'f', 9, 64)), i.e. the nano-USD amount
// nearest to the float, never by multiplying floats; so 12.5 is exactly
// 12_500_000_000 and 0.1 is exactly 100_000_000. NaN, infinities, negative
// amounts and amounts above math.MaxInt64 nano-USD are errors.
func FromClaims(claims []auth.BudgetClaim) ([]Limit, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	out := make([]Limit, 0, len(claims))
	for i, c := range claims {
		v := c.Value
		switch {
		case v == "":
			v = Star
		case config.Qualified(c.Scope) && v != Star && strings.IndexByte(v, '/') < 0:
			v = "*/" + v
		}
		l, err := parseLimit(c.Scope, v, c.Period)
		if err == nil {
			l.AmountNano, err = USDFloatToNano(c.AmountUSD)
		}
		if err != nil {
			return nil, fmt.Errorf("budgets claim [%d]: %w", i, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// USDFloatToNano converts a dollar amount held in a float64 (as JSON claims
// carry it) to nano-USD exactly as FromClaims documents.
func USDFloatToNano(usd float64) (int64, error) {
	if math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 {
		return 0, fmt.Errorf("amount %v usd: not a non-negative finite number", usd)
	}
	return parseUSD(strconv.FormatFloat(usd, 'f', 9, 64))
}

// errAmount is wrapped by parseUSD for text that is not a plain decimal.
var errAmount = errors.New("not a non-negative decimal with at most 9 fractional digits")

// parseUSD parses a decimal dollar amount ("250", "12.50") into nano-USD
// exactly, without floating point.
func parseUSD(s string) (int64, error) {
	whole, frac := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			whole, frac = s[:i], s[i+1:]
			if frac == "" {
				return 0, fmt.Errorf("parse amount %q: %w", s, errAmount)
			}
			break
		}
	}
	if whole == "" || len(frac) > 9 || !isDigits(whole) || !isDigits(frac) {
		return 0, fmt.Errorf("parse amount %q: %w", s, errAmount)
	}
	var n int64
	for i := 0; i < len(whole); i++ {
		d := int64(whole[i] - '0')
		if n > (math.MaxInt64/NanoPerUSD-d)/10 {
			return 0, fmt.Errorf("parse amount %q: %w", s, strconv.ErrRange)
		}
		n = n*10 + d
	}
	n *= NanoPerUSD
	scale := int64(NanoPerUSD / 10)
	for i := 0; i < len(frac); i++ {
		n += int64(frac[i]-'0') * scale
		scale /= 10
	}
	if n < 0 {
		return 0, fmt.Errorf("parse amount %q: %w", s, strconv.ErrRange)
	}
	return n, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// formatUSD formats nano-USD with nine fractional digits.
func formatUSD(nano int64) string {
	sign := ""
	u := uint64(nano)
	if nano < 0 {
		sign, u = "-", -u
	}
	return fmt.Sprintf("%s%d.%09d", sign, u/NanoPerUSD, u%NanoPerUSD)
}

// ValidateHierarchy checks that configured limits do not promise a child
// more than its parent can give, unless overcommit is true. For each period
// it checks three rules:
//
//  1. For each scope below global, the explicit (not "*" or "*/name")
//     limits added together must not exceed the global limit.
//  2. A "*" or "*/name" limit of a scope must not exceed any limit of a
//     wider scope, and an explicit limit must not exceed a "*" limit of a
//     wider scope: each value of the narrower scope sits inside some value
//     of the wider one, which has that limit.
//  3. Team and project values name their department, so the explicit team
//     limits of a department added together, and likewise its project
//     limits, must not exceed that department's explicit limit.
func ValidateHierarchy(limits []Limit, overcommit bool) error {
	if overcommit {
		return nil
	}
	var errs []error
	for p := range numPeriods {
		var sums [numScopes]int64
		global := int64(-1)
		for _, l := range limits {
			if l.Period != p {
				continue
			}
			if l.Scope == ScopeGlobal {
				global = l.AmountNano
			} else if !l.perValue() {
				sums[l.Scope] = satAdd(sums[l.Scope], l.AmountNano)
			}
		}
		if global >= 0 {
			for s := ScopeDept; s < numScopes; s++ {
				if sums[s] > global {
					errs = append(errs, fmt.Errorf("%s limits of scope %s add up to %s USD, above the global limit of %s USD",
						Period(p), s, formatUSD(sums[s]), formatUSD(global)))
				}
			}
		}
		for _, child := range limits {
			for _, parent := range limits {
				if child.Period != p || parent.Period != p || parent.Scope >= child.Scope ||
					(!child.perValue() && parent.Value != Star) {
					continue
				}
				if child.AmountNano > parent.AmountNano {
					errs = append(errs, fmt.Errorf("limit %s exceeds wider limit %s", child, parent))
				}
			}
		}
		errs = append(errs, deptSums(limits, p)...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("budget hierarchy (set budget_overcommit to allow): %w", errors.Join(errs...))
	}
	return nil
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// deptSums is ValidateHierarchy's rule 3 for period p.
func deptSums(limits []Limit, p Period) []error {
	var errs []error
	for _, parent := range limits {
		if parent.Period != p || parent.Scope != ScopeDept || parent.Value == Star {
			continue
		}
		for _, sc := range []Scope{ScopeTeam, ScopeProject} {
			var sum int64
			for _, child := range limits {
				if child.Period != p || child.Scope != sc || child.perValue() {
					continue
				}
				if d, _, ok := SplitQualified(child.Value); ok && d == parent.Value {
					sum = satAdd(sum, child.AmountNano)
				}
			}
			if sum > parent.AmountNano {
				errs = append(errs, fmt.Errorf("%s limits of scope %s in dept %q add up to %s USD, above its limit of %s USD",
					p, sc, parent.Value, formatUSD(sum), formatUSD(parent.AmountNano)))
			}
		}
	}
	return errs
}
