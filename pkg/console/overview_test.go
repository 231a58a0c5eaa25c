package console

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/config"
)

// site is a console on a real admin listener on a loopback port, reading
// the rig's data layer.
type site struct {
	t    testing.TB
	c    *Console
	base string
}

func newSite(t testing.TB, d *Data) *site {
	t.Helper()
	cfg := &config.Config{}
	cfg.ApplyDefaults()
	c, err := New(Options{Config: func() *config.Config { return cfg }, Pages: PageOptions{Data: d}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := admin.New(admin.Options{Console: c})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
	})
	return &site{t: t, c: c, base: "http://" + ln.Addr().String()}
}

// get fetches path as u and returns the status and body.
func (s *site) get(u User, path string) (int, string) {
	s.t.Helper()
	resp := s.open(u, path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// open starts a GET of path as u.
func (s *site) open(u User, path string) *http.Response {
	s.t.Helper()
	id, _, err := s.c.NewSessionForTest(context.Background(), u)
	if err != nil {
		s.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: id})
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

var spendAttr = regexp.MustCompile(`class="num spend" data-scope="([^"]+)" data-period="([a-z]+)" data-nano="(-?[0-9]+)"`)

// spendOf reads the live figures of a page: data-nano by "scope period".
func spendOf(t *testing.T, body string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range spendAttr.FindAllStringSubmatch(body, -1) {
		n, err := strconv.ParseInt(m[3], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]+" "+m[2]] = n
	}
	return out
}

var (
	asAdmin       = User{Subject: "ada", Role: access.Admin}
	asFinance     = User{Subject: "fin", Role: access.Finance}
	asEngLead     = User{Subject: "erin", Role: access.DeptAdmin, Dept: "eng"}
	asSalesViewer = User{Subject: "sam", Role: access.Viewer, Dept: "sales"}
)

func TestPages(t *testing.T) {
	r := newRig(t)
	r.drive()
	s := newSite(t, r.data)
	eng, sales := r.chSum("dept = 'eng'"), r.chSum("dept = 'sales'")

	t.Run("overview figures by role", func(t *testing.T) {
		for _, tc := range []struct {
			u    User
			want map[string]int64
		}{
			{asAdmin, map[string]int64{"dept:eng day": eng, "dept:eng month": eng, "dept:sales day": sales, "dept:sales month": sales}},
			{asFinance, map[string]int64{"dept:eng day": eng, "dept:eng month": eng, "dept:sales day": sales, "dept:sales month": sales}},
			{asEngLead, map[string]int64{"dept:eng day": eng, "dept:eng month": eng}},
			{asSalesViewer, map[string]int64{"dept:sales day": sales, "dept:sales month": sales}},
		} {
			st, body := s.get(tc.u, "/ui/")
			got := spendOf(t, body)
			if st != http.StatusOK || len(got) != len(tc.want) {
				t.Errorf("%s: %d, figures %v, want %v", tc.u.Role, st, got, tc.want)
				continue
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: %s is %d, ClickHouse %d", tc.u.Role, k, got[k], v)
				}
			}
			for _, want := range []string{`id="spend-chart"`, `data-nanos="`, `/ui/static/charts.js`, `id="top-teams"`, `id="drift-table"`} {
				if !strings.Contains(body, want) {
					t.Errorf("%s: the overview lacks %s", tc.u.Role, want)
				}
			}
			if strings.Contains(body, "<script>") || strings.Contains(body, " style=") {
				t.Errorf("%s: inline script or style", tc.u.Role)
			}
		}
	})

	t.Run("refusals and bad input", func(t *testing.T) {
		for _, tc := range []struct {
			u      User
			path   string
			status int
			text   string
		}{
			{asSalesViewer, "/ui/budgets", http.StatusForbidden, "not allowed"},
			{asSalesViewer, "/ui/models", http.StatusForbidden, "not allowed"},
			{asSalesViewer, "/ui/requests", http.StatusForbidden, "not allowed"},
			{asEngLead, "/ui/budgets?scope=dept:sales", http.StatusForbidden, "not allowed"},
			{asEngLead, "/ui/budgets?scope=subject:dave", http.StatusForbidden, "not allowed"},
			{asEngLead, "/ui/requests?dept=sales", http.StatusForbidden, "not allowed"},
			{asEngLead, "/ui/models", http.StatusForbidden, "not allowed"},
			{asAdmin, "/ui/budgets?scope=region:eu", http.StatusBadRequest, "scope"},
			{asAdmin, "/ui/budgets?scope=team:nlp", http.StatusBadRequest, "department"},
			{asAdmin, "/ui/requests?status=teapot", http.StatusBadRequest, "status"},
			{asAdmin, "/ui/requests?after=%00", http.StatusBadRequest, "cursor"},
			{asAdmin, "/ui/requests?from=yesterday", http.StatusBadRequest, "date"},
			{asAdmin, "/ui/requests/req-none", http.StatusNotFound, "request id"},
			{asAdmin, "/ui/requests/req-none?dept=eng", http.StatusBadRequest, "locate"},
			{asAdmin, "/ui/requests/req-none?dept=eng&at=-5", http.StatusBadRequest, "locate"},
			{asEngLead, "/ui/requests/req-none?dept=sales&at=5", http.StatusForbidden, "not allowed"},
		} {
			st, body := s.get(tc.u, tc.path)
			if st != tc.status || !strings.Contains(body, "error-state") || !strings.Contains(strings.ToLower(body), tc.text) {
				t.Errorf("%s %s: %d, want %d with %q in an error-state\n%s", tc.u.Role, tc.path, st, tc.status, tc.text, body)
			}
		}
	})

	t.Run("budgets", func(t *testing.T) {
		st, body := s.get(asEngLead, "/ui/budgets?scope=team:eng/nlp")
		nlp := r.chSum("dept = 'eng' AND team = 'nlp'")
		got := spendOf(t, body)
		if st != http.StatusOK || got["team:eng/nlp month"] != nlp || got["project:eng/p1 month"] != r.chSum("dept = 'eng' AND project = 'p1'") {
			t.Errorf("eng/nlp: %d %v, ClickHouse %d\n%s", st, got, nlp, body)
		}
		if !strings.Contains(body, `id="budgets-table"`) || !strings.Contains(body, `href="/ui/budgets?scope=project%3aeng%2fp2"`) {
			t.Errorf("eng/nlp page lacks its limit or its projects\n%s", body)
		}
	})

	t.Run("requests and explain", func(t *testing.T) {
		st, body := s.get(asEngLead, "/ui/requests")
		ids := regexp.MustCompile(`<tr data-request-id="([^"]+)">`).FindAllStringSubmatch(body, -1)
		links := regexp.MustCompile(`href="(/ui/requests/[^"?]+\?dept=eng&amp;at=[0-9]+)"`).FindAllStringSubmatch(body, -1)
		if st != http.StatusOK || len(ids) != 6 || len(links) != 6 || strings.Contains(body, "<td>sales</td>") {
			t.Fatalf("eng's requests: %d, %d rows, %d links\n%s", st, len(ids), len(links), body)
		}
		st, body = s.get(asEngLead, strings.ReplaceAll(links[0][1], "&amp;", "&"))
		if st != http.StatusOK || !strings.Contains(body, `id="charge-total"`) {
			t.Fatalf("explain by the list's link: %d\n%s", st, body)
		}
		st, body = s.get(asEngLead, "/ui/requests/"+ids[0][1])
		total := regexp.MustCompile(`id="charge-total" data-nano="([0-9]+)"`).FindStringSubmatch(body)
		if st != http.StatusOK || total == nil || total[1] == "0" {
			t.Fatalf("explain: %d %v\n%s", st, total, body)
		}
		if st, _ := s.get(asSalesViewer, "/ui/requests/"+ids[0][1]); st != http.StatusForbidden {
			t.Errorf("a sales viewer explains an eng request: %d", st)
		}
		if st, _ := s.get(User{Subject: "sid", Role: access.DeptAdmin, Dept: "sales"}, "/ui/requests/"+ids[0][1]); st != http.StatusForbidden {
			t.Errorf("a sales dept-admin explains an eng request: %d", st)
		}
	})

	t.Run("models", func(t *testing.T) {
		st, body := s.get(asFinance, "/ui/models")
		if st != http.StatusOK || !strings.Contains(body, `id="models-table"`) || !strings.Contains(body, `data-model="mock-large"`) || !strings.Contains(body, `data-target="mock/mock-gpt"`) {
			t.Errorf("models: %d\n%s", st, body)
		}
	})

	t.Run("events follow the totals", func(t *testing.T) {
		resp := s.open(asSalesViewer, "/ui/events")
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		ev := newEventReader(t, resp.Body)
		seen := map[string]int64{}
		for len(seen) < 2 {
			lt := ev.next()
			if lt.Scope != "dept:sales" {
				t.Fatalf("a sales viewer is sent %+v", lt)
			}
			seen[lt.Period] = lt.SpentNano
		}
		if seen["day"] != sales || seen["month"] != sales {
			t.Fatalf("first events %v, ClickHouse %d", seen, sales)
		}
		r.chat(principal{"sales", "ops", "p9", "dave", "key-d"}, "mock-gpt", 200)
		r.settle(9)
		after := r.chSum("dept = 'sales'")
		for seen["month"] != after {
			lt := ev.next()
			if lt.SpentNano > after {
				t.Fatalf("event %+v above ClickHouse's %d", lt, after)
			}
			seen[lt.Period] = lt.SpentNano
		}
	})

	t.Run("ClickHouse not configured", func(t *testing.T) {
		s := newSite(t, &Data{Totals: r.tracker, Routes: r.gw.Routes})
		st, body := s.get(asAdmin, "/ui/")
		if got := spendOf(t, body); st != http.StatusOK || !strings.Contains(body, "error-state") || got["dept:eng month"] == 0 {
			t.Errorf("overview without ClickHouse: %d %v\n%s", st, got, body)
		}
		for _, path := range []string{"/ui/requests", "/ui/models", "/ui/budgets?scope=team:eng/nlp"} {
			if st, body := s.get(asAdmin, path); st != http.StatusOK || !strings.Contains(body, "error-state") || !strings.Contains(body, "TOLLGATE_CLICKHOUSE") {
				t.Errorf("%s without ClickHouse: %d\n%s", path, st, body)
			}
		}
	})

	t.Run("no data layer", func(t *testing.T) {
		s := newSite(t, nil)
		if st, body := s.get(asAdmin, "/ui/budgets"); st != http.StatusServiceUnavailable || !strings.Contains(body, "error-state") {
			t.Errorf("budgets without a data layer: %d\n%s", st, body)
		}
	})
}

// eventReader reads the totals events of a server-sent event stream.
type eventReader struct {
	t  *testing.T
	sc *bufio.Scanner
}

func newEventReader(t *testing.T, r io.Reader) *eventReader {
	return &eventReader{t: t, sc: bufio.NewScanner(r)}
}

func (e *eventReader) next() LiveTotal {
	e.t.Helper()
	name := ""
	for e.sc.Scan() {
		line := e.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && name == "totals":
			var lt LiveTotal
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &lt); err != nil {
				e.t.Fatal(err)
			}
			return lt
		}
	}
	e.t.Fatalf("event stream ended: %v", e.sc.Err())
	return LiveTotal{}
}
