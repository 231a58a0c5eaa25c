package console

import (
	"html/template"
	"net/http"

	"github.com/tollgate/tollgate/pkg/access"
)

// This file is the hook the read pages (overview, budgets, requests,
// models, events) plug into: readPages registers them with c.page, and
// PageOptions carries what they read. Until they are built each answers
// a designed "not built yet" state.

// PageOptions feed the read pages (Options.Pages).
type PageOptions struct{}

// pageFuncs are template functions of the read pages.
func pageFuncs() template.FuncMap { return template.FuncMap{} }

// readPages registers the read pages.
func (c *Console) readPages() {
	for _, p := range []struct{ pattern, action, title string }{
		{"GET " + Prefix + "{$}", access.SpendView, "Overview"},
		{"GET " + Prefix + "budgets", access.BudgetsView, "Budgets"},
		{"GET " + Prefix + "requests", access.RequestsView, "Requests"},
		{"GET " + Prefix + "requests/{id}", access.RequestsView, "Request"},
		{"GET " + Prefix + "models", access.ModelsView, "Models"},
	} {
		c.page(p.pattern, p.action, func(w http.ResponseWriter, r *http.Request) {
			c.render(w, r, http.StatusOK, "soon", p.title, nil)
		})
	}
}
