package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
)

// overviewPage serves GET /ui/: spend today and this month per department
// against its limits with their forecasts, top models and teams, drift,
// and spend over time. Figures update from GET /ui/events.
func (c *Console) overviewPage(w http.ResponseWriter, r *http.Request) {
	d := c.data()
	if d == nil {
		c.notConfigured(w, r)
		return
	}
	o, err := d.Overview(r.Context(), viewOf(r, access.SpendView))
	if err != nil {
		c.pageError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", "Overview", o)
}

// viewOf is the View of r's user for action: every department for a role
// allowed it on the whole gateway, else the user's own department (the
// zero View, which sees nothing, when that is not allowed either).
func viewOf(r *http.Request, action string) View {
	u, ok := UserFrom(r.Context())
	switch {
	case !ok:
		return View{}
	case access.Allowed(u.Role, action, "", u.Dept):
		return AllDepts()
	case access.Allowed(u.Role, action, u.Dept, u.Dept):
		return OneDept(u.Dept)
	}
	return View{}
}

// data returns the read pages' data layer, nil when the gateway gave none.
func (c *Console) data() *Data { return c.o.Pages.Data }

// pageError answers the designed error page for an error of the data
// layer: 400 for bad input, 403 for another department, 404 for an
// unknown request, 503 otherwise (ClickHouse down or not configured).
func (c *Console) pageError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrBadInput):
		c.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrNotAllowed):
		c.forbid(w, r)
	case errors.Is(err, billing.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No usage event has this request id (yet: events reach ClickHouse within seconds).")
	default:
		c.log.Warn("console page", "path", r.URL.Path, "error", err)
		c.fail(w, r, http.StatusServiceUnavailable, err.Error())
	}
}

// notConfigured answers the page of a gateway that gave the console no
// data layer.
func (c *Console) notConfigured(w http.ResponseWriter, r *http.Request) {
	c.fail(w, r, http.StatusServiceUnavailable, "This gateway gives the console no spend data (no budget tracker).")
}

// readPageFuncs are the read pages' template functions.
func readPageFuncs() template.FuncMap {
	return template.FuncMap{
		// pct writes a ratio as a percentage with one decimal.
		"pct": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
		// daysShown is the overview chart's span in days.
		"daysShown": func() int { return SeriesDays },
		// daysOf and nanosOf write the chart's series as comma-separated
		// lists for charts.js (data attributes: no inline script).
		"daysOf": func(ps []DayPoint) string {
			s := make([]string, len(ps))
			for i, p := range ps {
				s[i] = p.Day
			}
			return strings.Join(s, ",")
		},
		"nanosOf": func(ps []DayPoint) string {
			s := make([]string, len(ps))
			for i, p := range ps {
				s[i] = strconv.FormatInt(p.CostNano, 10)
			}
			return strings.Join(s, ",")
		},
		// childrenTitle names the level below a node of the drill-down.
		"childrenTitle": func(n Node) string {
			switch n.Scope {
			case budget.ScopeGlobal:
				return "Departments"
			case budget.ScopeDept:
				return "Teams"
			case budget.ScopeTeam:
				return "Projects (month to date)"
			case budget.ScopeProject:
				return "Subjects (month to date)"
			}
			return "Keys (month to date)"
		},
		// ms writes microseconds as milliseconds.
		"ms": func(us uint64) string { return fmt.Sprintf("%.0f ms", float64(us)/1000) },
		// dur writes a duration to the millisecond, "" for none.
		"dur": func(d time.Duration) string {
			if d <= 0 {
				return ""
			}
			return d.Round(time.Millisecond).String()
		},
	}
}
