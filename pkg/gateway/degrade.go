package gateway

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// headerPriority is the request header that names a request's priority
// for the degradation ladder; absent means "interactive".
const headerPriority = "X-Tollgate-Priority"

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

// degrade finds the highest step that applies to the request: its scope
// value has spent at least step.At of the limit and its priority matches.
func (g *Gateway) degrade(c *fiber.Ctx, st *state, p *auth.Principal) *degradation {
	if len(st.ladders) == 0 || g.acct.Tracker == nil {
		return nil
	}
	prio := string(c.Request().Header.Peek(headerPriority))
	if prio == "" {
		prio = "interactive"
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

func matchPriority(list []string, prio string) bool {
	if len(list) == 0 {
		return true
	}
	for _, p := range list {
		if p == prio {
			return true
		}
	}
	return false
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
