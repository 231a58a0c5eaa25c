package console

import (
	"net/http"
	"slices"
	"time"

	"github.com/tollgate/tollgate/pkg/audit"
)

// auditLimit is the most events the audit page shows, newest first.
const auditLimit = 500

// auditData is the data of the audit page.
type auditData struct {
	Events  []audit.Event
	Since   string // the since filter as given, a date
	More    bool   // more than auditLimit events matched
	Error   string
	Missing bool // no audit log configured
}

// auditPage serves GET /ui/audit (?since=2026-12-01): every operator
// change, from the console and the admin API alike, newest first, with
// who made it and the state before and after.
func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	d := auditData{Since: r.URL.Query().Get("since")}
	if c.o.AuditLog == nil {
		d.Missing = true
		c.render(w, r, http.StatusOK, "audit", "Audit log", d)
		return
	}
	var since time.Time
	if d.Since != "" {
		t, err := time.Parse("2006-01-02", d.Since)
		if err != nil {
			d.Error = "since: give a date such as 2026-12-01."
			c.render(w, r, http.StatusBadRequest, "audit", "Audit log", d)
			return
		}
		since = t
	}
	events, err := c.o.AuditLog(r.Context(), since)
	if err != nil {
		c.log.Warn("console audit list", "error", err)
		d.Error = "The audit log cannot be read right now: " + err.Error()
		c.render(w, r, http.StatusServiceUnavailable, "audit", "Audit log", d)
		return
	}
	slices.Reverse(events)
	if len(events) > auditLimit {
		events, d.More = events[:auditLimit], true
	}
	d.Events = events
	c.render(w, r, http.StatusOK, "audit", "Audit log", d)
}
