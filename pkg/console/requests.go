package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/billing"
)

// requestsData is the requests page: the page of events, the filter as
// the form shows it, and the link to the next page.
type requestsData struct {
	Page *RequestPage
	// Form holds the filter's fields as given.
	Form url.Values
	// Next is the URL of the next page, "" on the last.
	Next string
	// Depts is whether the user may filter by department (every
	// department in view).
	Depts bool
	// Error is why the events cannot be shown (ClickHouse down or not
	// configured); the form still shows.
	Error error
}

// timeForms are the layouts from and to accept: a date, a browser's
// datetime-local, RFC 3339.
var timeForms = []string{time.DateOnly, "2006-01-02T15:04", time.RFC3339}

func parseFormTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range timeForms {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s is a date (2006-01-02) or a time (2006-01-02T15:04, UTC)", ErrBadInput, name)
}

// requestsPage serves GET /ui/requests?dept=&team=&model=&status=&from=&to=&after=.
func (c *Console) requestsPage(w http.ResponseWriter, r *http.Request) {
	d := c.data()
	if d == nil {
		c.notConfigured(w, r)
		return
	}
	q := r.URL.Query()
	f := RequestFilter{Dept: q.Get("dept"), Team: q.Get("team"), Model: q.Get("model"), Status: q.Get("status"), After: q.Get("after")}
	var err error
	if f.From, err = parseFormTime("from", q.Get("from")); err != nil {
		c.pageError(w, r, err)
		return
	}
	if f.To, err = parseFormTime("to", q.Get("to")); err != nil {
		c.pageError(w, r, err)
		return
	}
	v := viewOf(r, access.RequestsView)
	data := requestsData{Form: q, Depts: v.All()}
	page, err := d.Requests(r.Context(), v, f)
	switch {
	case err == nil:
		data.Page = page
		if page.Next != "" {
			next := url.Values{}
			for _, k := range []string{"dept", "team", "model", "status", "from", "to"} {
				if q.Get(k) != "" {
					next.Set(k, q.Get(k))
				}
			}
			next.Set("after", page.Next)
			data.Next = Prefix + "requests?" + next.Encode()
		}
	case errorsIsPageRefusal(err):
		c.pageError(w, r, err)
		return
	default:
		c.log.Warn("console requests", "error", err)
		data.Error = err
	}
	c.render(w, r, http.StatusOK, "requests", "Requests", data)
}

// requestPage serves GET /ui/requests/{id}?dept=&at=: the request's charge with the
// breakdown of its price and the budgets it was checked against.
func (c *Console) requestPage(w http.ResponseWriter, r *http.Request) {
	d := c.data()
	if d == nil {
		c.notConfigured(w, r)
		return
	}
	q := r.URL.Query()
	var hint RequestHint
	if q.Has("dept") || q.Has("at") {
		ms, err := strconv.ParseInt(q.Get("at"), 10, 64)
		if err != nil || ms < 0 || q.Get("dept") == "" {
			c.pageError(w, r, fmt.Errorf("%w: dept and at (Unix milliseconds) locate a request together", ErrBadInput))
			return
		}
		hint = RequestHint{Dept: q.Get("dept"), At: time.UnixMilli(ms)}
	}
	ch, err := d.Request(r.Context(), viewOf(r, access.RequestsView), r.PathValue("id"), hint)
	if err != nil {
		c.pageError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "request", "Request "+ch.RequestID, ch)
}

// errorsIsPageRefusal reports an error that refuses the whole page (bad
// input, another department) rather than the history alone.
func errorsIsPageRefusal(err error) bool {
	return errors.Is(err, ErrBadInput) || errors.Is(err, ErrNotAllowed) || errors.Is(err, billing.ErrNotFound)
}
