package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// headerPriority is the request header that lowers a request's priority
// for the degradation ladder below its principal's (config.Priority).
const headerPriority = "X-Tollgate-Priority"

// codeInvalidPriority refuses a priority header or claim that names no
// configured level.
const codeInvalidPriority = "invalid_priority"

// priorities are the configured priority levels, highest first, lowercase.
type priorities struct {
	levels []string
	def    int // index of priority.default
}

func newPriorities(p config.Priority) priorities {
	ps := priorities{levels: p.LevelNames()}
	ps.def = max(0, ps.index([]byte(p.DefaultLevel())))
	return ps
}

// index is the level named name in any case, or -1. It does not allocate.
func (ps *priorities) index(name []byte) int {
	for i, l := range ps.levels {
		if len(l) == len(name) && bytes.EqualFold([]byte(l), name) {
			return i
		}
	}
	return -1
}

// of is the priority a request is served at (issue 41, finding 9): its
// principal's (priority claim or API key field, else the default), lowered
// by the x-tollgate-priority header when that names a later level and
// never raised by it. A header or claim that names no level is an error.
func (ps *priorities) of(c *fiber.Ctx, p *auth.Principal) (string, *apiError) {
	ceiling := ps.def
	if p.Priority != "" {
		if ceiling = ps.index([]byte(p.Priority)); ceiling < 0 {
			return "", &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: codeInvalidPriority,
				Message: fmt.Sprintf("the credential's priority names no priority level (want %s)", strings.Join(ps.levels, ", "))}
		}
	}
	h := c.Request().Header.Peek(headerPriority)
	if len(h) == 0 {
		return ps.levels[ceiling], nil
	}
	i := ps.index(h)
	if i < 0 {
		return "", errBadRequest(codeInvalidPriority, "",
			fmt.Sprintf("x-tollgate-priority names no priority level (want one of %s)", strings.Join(ps.levels, ", ")))
	}
	return ps.levels[max(i, ceiling)], nil
}

// ladder is one budget limit's degradation steps, highest first.
type ladder struct {
	scope     budget.Scope
	value     string // as in budgets[].value: "research/ml", "*/ml", budget.Star
	period    budget.Period
	limitNano int64
	steps     []config.DegradeStep
}

// buildLadders reads the degradation steps of the configured limits.
func buildLadders(cfg *config.Config) []ladder {
	var out []ladder
	for _, b := range cfg.Budgets {
		if len(b.Degrade) == 0 {
			continue
		}
		sc, err1 := budget.ParseScope(b.Scope)
		per, err2 := budget.ParsePeriod(b.Period)
		amount, err3 := pricing.ParseUSD(b.AmountUSD)
		if err1 != nil || err2 != nil || err3 != nil || amount <= 0 {
			continue // Validate refused these already
		}
		steps := append([]config.DegradeStep(nil), b.Degrade...)
		for i := range steps {
			steps[i].Priorities = lower(steps[i].Priorities)
		}
		sort.Slice(steps, func(i, j int) bool { return steps[i].At > steps[j].At })
		out = append(out, ladder{scope: sc, value: b.Value, period: per, limitNano: amount, steps: steps})
	}
	return out
}

// degradation is the step a request is subject to, if any.
type degradation struct {
	step  config.DegradeStep
	label string // e.g. "dept=research month 80% model=mock-mini", in the usage event
}

// lower returns names lowercased, in a new slice.
func lower(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToLower(n)
	}
	return out
}

// degrade finds the highest step that applies to the request: its scope
// value has spent at least step.At of the limit and its priority prio
// (priorities.of) matches.
func (g *Gateway) degrade(st *state, p *auth.Principal, prio string) *degradation {
	if len(st.ladders) == 0 || g.acct.Tracker == nil {
		return nil
	}
	scopes := &principalBudgetOf(p).scopes
	for i := range st.ladders {
		l := &st.ladders[i]
		v := scopes.Value(l.scope)
		if lim := (budget.Limit{Scope: l.scope, Value: l.value}); l.scope != budget.ScopeGlobal && (v == "" || !lim.Matches(v)) {
			continue
		}
		used := float64(g.acct.Tracker.Used(l.scope, v, l.period)) / float64(l.limitNano)
		for _, s := range l.steps {
			if used < s.At || !matchPriority(s.Priorities, prio) {
				continue
			}
			action := "refuse"
			if s.Model != "" {
				action = "model=" + s.Model
			}
			d := &degradation{step: s, label: fmt.Sprintf("%s=%s %s %s%% %s", l.scope, v, l.period,
				strconv.FormatFloat(100*s.At, 'f', -1, 64), action)}
			g.alertDegradation(l, v, d)
			return d
		}
	}
	return nil
}

// matchPriority reports whether a step for list (lowercase; empty is
// every priority) applies to prio.
func matchPriority(list []string, prio string) bool {
	return len(list) == 0 || slices.Contains(list, prio)
}

// degradeAlerts remembers the steps already announced, so each is
// published once per period by this gateway.
type degradeAlerts struct {
	mu   sync.Mutex
	seen map[string]bool // guarded by mu
}

// alertDegradation publishes a step the first time it is taken in a period
// to tollgate.budget.alerts.<scope>, like the budget service's alerts.
func (g *Gateway) alertDegradation(l *ladder, value string, d *degradation) {
	if g.alert == nil {
		return
	}
	start := g.acct.Tracker.PeriodStart(l.period)
	key := d.label + " " + start
	g.alerts.mu.Lock()
	if g.alerts.seen == nil {
		g.alerts.seen = map[string]bool{}
	}
	first := !g.alerts.seen[key]
	g.alerts.seen[key] = true
	g.alerts.mu.Unlock()
	if !first {
		return
	}
	body, _ := json.Marshal(map[string]any{
		"kind": "degradation", "scope": l.scope.String(), "value": value, "period": l.period.String(),
		"period_start": start, "limit_nano_usd": l.limitNano, "threshold": d.step.At,
		"spend_nano_usd": g.acct.Tracker.Used(l.scope, value, l.period), "step": d.label,
	})
	g.alert(budget.AlertSubjectPrefix+l.scope.String(), body)
}
