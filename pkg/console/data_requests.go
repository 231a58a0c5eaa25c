package console

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/chsql"
)

// RequestFilter selects the requests page's events. Empty fields select
// everything; From and To default to the last DefaultRequestsRange.
type RequestFilter struct {
	Dept, Team, Model string
	// Status is "", "ok", "error" or an HTTP status code ("429").
	Status   string
	From, To time.Time
	// After is the cursor of the previous page's last row ("" for the
	// first page).
	After string
	// Limit is the page size: default and at most MaxRequestsPage.
	Limit int
}

const (
	// MaxRequestsPage is the requests page's size.
	MaxRequestsPage = 50
	// DefaultRequestsRange is how far back the requests page looks
	// without a From.
	DefaultRequestsRange = 31 * 24 * time.Hour
	// maxFilterLen bounds each text filter.
	maxFilterLen = 256
)

// requestWindows are the spans the page reads, newest first, before the
// whole range: at scale the first holds a page, and a window bounds the
// rows ClickHouse reads (usage_events is sorted by department, then time).
var requestWindows = []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// RequestRow is one usage event on the requests page.
type RequestRow struct {
	RequestID                         string
	Time                              time.Time
	Dept, Team, Project, Subject, Key string
	Model, Provider                   string
	Status                            uint32
	ErrorType                         string
	PromptTokens, CompletionTokens    uint64
	CostNano                          int64
	LatencyUs                         uint64
}

// RequestPage is one page of requests, newest first.
type RequestPage struct {
	Filter RequestFilter
	Rows   []RequestRow
	// Next is the cursor of the next page, "" on the last.
	Next string
}

// cursor is a position in (ts_ms, request_id) order.
type cursor struct {
	tsMs      uint64
	requestID string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(c.tsMs, 10) + ":" + c.requestID))
}

func parseCursor(s string) (cursor, error) {
	bad := fmt.Errorf("%w: after is not a cursor of this page", ErrBadInput)
	if len(s) > 2*maxFilterLen {
		return cursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, bad
	}
	ts, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseUint(ts, 10, 63)
	if !ok || err != nil || id == "" {
		return cursor{}, bad
	}
	return cursor{tsMs: n, requestID: id}, nil
}

// ParseStatus checks a status filter: "", "ok", "error" or a code 100-599.
func ParseStatus(s string) error {
	switch s {
	case "", "ok", "error":
		return nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 100 && n <= 599 && strconv.Itoa(n) == s {
		return nil
	}
	return fmt.Errorf("%w: status is ok, error or an HTTP status code", ErrBadInput)
}

// check validates f's text fields.
func (f *RequestFilter) check(now time.Time) error {
	for name, v := range map[string]string{"dept": f.Dept, "team": f.Team, "model": f.Model} {
		if len(v) > maxFilterLen || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%w: %s is longer than %d bytes or has a control character", ErrBadInput, name, maxFilterLen)
		}
	}
	if err := ParseStatus(f.Status); err != nil {
		return err
	}
	if !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From) {
		return fmt.Errorf("%w: to is before from", ErrBadInput)
	}
	if f.From.After(now) {
		return fmt.Errorf("%w: from is in the future", ErrBadInput)
	}
	return nil
}

// Requests returns a page of f's events in v: f.Dept must be one v sees
// (a one-department View's own when empty). Pages follow each other by
// keyset on (time, request id), so a deep page costs what the first does.
func (d *Data) Requests(ctx context.Context, v View, f RequestFilter) (*RequestPage, error) {
	now := d.now()
	if err := f.check(now); err != nil {
		return nil, err
	}
	asked := f.Dept
	switch {
	case f.Dept == "" && !v.All():
		f.Dept = v.bind()
	case f.Dept != "" && !v.Sees(f.Dept):
		return nil, ErrNotAllowed
	}
	if f.To.IsZero() {
		f.To = now
	}
	if f.From.IsZero() {
		f.From = f.To.Add(-DefaultRequestsRange)
	}
	if f.Limit <= 0 || f.Limit > MaxRequestsPage {
		f.Limit = MaxRequestsPage
	}
	after := cursor{tsMs: uint64(f.To.Unix()+1) * 1000}
	if f.After != "" {
		c, err := parseCursor(f.After)
		if err != nil {
			return nil, err
		}
		after = c
	}
	conn, err := d.conn()
	if err != nil {
		return nil, err
	}
	page := &RequestPage{Filter: f}
	// The window ends at the cursor's second (its events of that second
	// included) and grows until it holds a page or covers the range.
	end := time.UnixMilli(int64(after.tsMs)).Truncate(time.Second)
	if end.After(f.To) {
		end = f.To
	}
	var keys []requestKey
	for i := 0; ; i++ {
		start := f.From
		if i < len(requestWindows) && end.Add(-requestWindows[i]).After(f.From) {
			start = end.Add(-requestWindows[i])
		}
		keys, err = d.requestKeys(ctx, conn, &f, start, end, after, f.Limit+1)
		if err != nil {
			return nil, historyErr("requests", err)
		}
		if len(keys) > f.Limit || !start.After(f.From) {
			break
		}
	}
	if page.Rows, err = d.requestRows(ctx, conn, keys); err != nil {
		return nil, historyErr("requests", err)
	}
	if len(page.Rows) > f.Limit {
		page.Rows = page.Rows[:f.Limit]
		last := page.Rows[f.Limit-1]
		page.Next = cursor{tsMs: uint64(last.Time.UnixMilli()), requestID: last.RequestID}.String()
	}
	page.Filter.Dept = asked
	return page, nil
}

// requestKey is where a row of a page is: its department, time and id.
type requestKey struct {
	dept      string
	tsMs      uint64
	requestID string
}

// requestKeys finds the rows of a page in [start, end]: the columns the
// filters and the order need, not the rows.
func (d *Data) requestKeys(ctx context.Context, conn chsql.Querier, f *RequestFilter, start, end time.Time, after cursor, limit int) ([]requestKey, error) {
	var out []requestKey
	args := []any{start.Unix(), end.Unix()}
	sql, deptSQL := chsql.ConsoleRecentKeys.SQL, chsql.ConsoleRecentKeysDept.SQL
	if f.Team != "" || f.Model != "" || f.Status != "" {
		args = append(args, f.Team, f.Team, f.Model, f.Model, f.Status, f.Status, f.Status, f.Status)
		sql, deptSQL = chsql.ConsoleRequestKeys.SQL, chsql.ConsoleRequestKeysDept.SQL
	}
	args = append(args, after.tsMs, after.tsMs, after.requestID, limit)
	if f.Dept != "" {
		sql, args = deptSQL, append([]any{f.Dept}, args...)
	}
	err := queryRows(ctx, conn, sql, args, func(rows chsql.Rows) error {
		var k requestKey
		err := rows.Scan(&k.dept, &k.tsMs, &k.requestID)
		out = append(out, k)
		return err
	})
	return out, err
}

// requestRows reads the rows of keys, in their order, by the sorting key
// (department, time): a few granules, whatever the window was.
func (d *Data) requestRows(ctx context.Context, conn chsql.Querier, keys []requestKey) ([]RequestRow, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	depts, ids := map[string]bool{}, make([]string, 0, len(keys))
	first, last := keys[0].tsMs, keys[0].tsMs
	for _, k := range keys {
		depts[k.dept] = true
		ids = append(ids, k.requestID)
		first, last = min(first, k.tsMs), max(last, k.tsMs)
	}
	set := make([]any, 0, len(depts))
	for _, dp := range sortedKeys(depts) {
		set = append(set, dp)
	}
	found := make(map[requestKey]RequestRow, len(keys))
	err := queryRows(ctx, conn, chsql.ConsoleRequestRows.SQL, []any{chsql.Set(set), first / 1000, last / 1000, ids},
		func(rows chsql.Rows) error {
			var r RequestRow
			var tsMs uint64
			if err := rows.Scan(&r.RequestID, &tsMs, &r.Dept, &r.Team, &r.Project, &r.Subject, &r.Key, &r.Model, &r.Provider,
				&r.Status, &r.ErrorType, &r.PromptTokens, &r.CompletionTokens, &r.CostNano, &r.LatencyUs); err != nil {
				return err
			}
			r.Time = time.UnixMilli(int64(tsMs)).UTC()
			found[requestKey{r.Dept, tsMs, r.RequestID}] = r
			return nil
		})
	if err != nil {
		return nil, err
	}
	out := make([]RequestRow, 0, len(keys))
	for _, k := range keys {
		if r, ok := found[k]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// RequestHint locates a request: its department and time, which the
// requests page's links carry, let the lookup read a few rows instead of
// searching every request id. The zero hint searches.
type RequestHint struct {
	Dept string
	At   time.Time
}

// Request returns the charge of one request with the breakdown of its
// price, or ErrNotAllowed when its department is not in v. A request not
// found wraps billing.ErrNotFound.
func (d *Data) Request(ctx context.Context, v View, requestID string, hint RequestHint) (*billing.Charge, error) {
	if requestID == "" || len(requestID) > maxFilterLen || strings.ContainsFunc(requestID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("%w: not a request id", ErrBadInput)
	}
	if d.Explainer == nil {
		return nil, ErrNoClickHouse
	}
	var c *billing.Charge
	var err error
	if hint.Dept != "" {
		if !v.Sees(hint.Dept) {
			return nil, ErrNotAllowed
		}
		c, err = d.Explainer.ExplainAt(ctx, requestID, hint.Dept, hint.At)
	} else {
		c, err = d.Explainer.Explain(ctx, requestID)
	}
	if err != nil {
		if errors.Is(err, billing.ErrNotFound) {
			return nil, err
		}
		return nil, historyErr("request", err)
	}
	if !v.Sees(c.Dept) {
		return nil, ErrNotAllowed
	}
	return c, nil
}
