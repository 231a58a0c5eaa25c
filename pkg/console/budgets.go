package console

import (
	"net/http"

	"github.com/tollgate/tollgate/pkg/access"
)

// budgetsPage serves GET /ui/budgets?scope=dept:eng: the limits of a node
// of the drill-down (every limit in view at the top) with live spend,
// reserved, headroom and forecast, and the level below it.
func (c *Console) budgetsPage(w http.ResponseWriter, r *http.Request) {
	d := c.data()
	if d == nil {
		c.notConfigured(w, r)
		return
	}
	n, err := ParseNode(r.URL.Query().Get("scope"))
	if err != nil {
		c.pageError(w, r, err)
		return
	}
	b, err := d.Budgets(r.Context(), viewOf(r, access.BudgetsView), n)
	if err != nil {
		c.pageError(w, r, err)
		return
	}
	title := "Budgets"
	if n.Value != "" {
		title = "Budgets: " + n.Scope.String() + " " + n.Value
	}
	c.render(w, r, http.StatusOK, "budgets", title, b)
}
