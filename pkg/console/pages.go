package console

import (
	"html/template"

	"github.com/tollgate/tollgate/pkg/access"
)

// This file is the hook the read pages (overview, budgets, requests,
// models, events) plug into: readPages registers them with c.page, and
// PageOptions carries what they read (data*.go).

// PageOptions feed the read pages (Options.Pages).
type PageOptions struct {
	// Data is the read pages' data layer: the gateway's spend totals,
	// ClickHouse, the explainer and the routes. Nil: each page answers a
	// designed "not configured" state.
	Data *Data
}

// pageFuncs are template functions of the read pages.
func pageFuncs() template.FuncMap { return readPageFuncs() }

// readPages registers the read pages.
func (c *Console) readPages() {
	c.page("GET "+Prefix+"{$}", access.SpendView, c.overviewPage)
	c.page("GET "+Prefix+"events", access.SpendView, c.eventsPage)
	c.page("GET "+Prefix+"budgets", access.BudgetsView, c.budgetsPage)
	c.page("GET "+Prefix+"requests", access.RequestsView, c.requestsPage)
	c.page("GET "+Prefix+"requests/{id}", access.RequestsView, c.requestPage)
	c.page("GET "+Prefix+"models", access.ModelsView, c.modelsPage)
}
