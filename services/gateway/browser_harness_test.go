package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// harnessCSP is the console's Content-Security-Policy: the harness must
// work under it (axe-core injected, DOM predicates awaited).
const harnessCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// harnessPages serves an accessible page whose figure a server-sent event
// updates, a page with known accessibility faults, and the script of the
// first; send pushes one event to the open event stream.
func harnessPages(t *testing.T) (srv *httptest.Server, send chan<- int64) {
	events := make(chan int64)
	mux := http.NewServeMux()
	page := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", harnessCSP)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Harness</title></head><body>`+body+`</body></html>`)
		}
	}
	mux.HandleFunc("GET /good", page(`<main><h1>Spend</h1>
<p>Engineering: <span class="spend" data-scope="dept:eng" data-nano="5">5</span></p>
<button type="button">Refresh</button></main><script src="/live.js"></script>`))
	mux.HandleFunc("GET /bad", page(`<main><h1>Faults</h1><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="><button type="button"></button></main>`))
	mux.HandleFunc("GET /live.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `new EventSource("/events").addEventListener("totals", e => {
  const d = JSON.parse(e.data);
  const el = document.querySelector('.spend[data-scope="' + d.scope + '"]');
  el.dataset.nano = d.spent_nano; el.textContent = d.spent_nano;
});`)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case n := <-events:
				fmt.Fprintf(w, "event: totals\ndata: {\"scope\":\"dept:eng\",\"spent_nano\":%d}\n\n", n)
				w.(http.Flusher).Flush()
			}
		}
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, events
}

// TestBrowserHarness proves the browser tests' tools on pages served by a
// test server with the console's CSP: chromium starts headless, axe-core
// passes an accessible page and names the faults of another, a live
// figure is awaited by its DOM change after a server-sent event, and a
// screenshot is a PNG.
func TestBrowserHarness(t *testing.T) {
	axe := axeScript(t)
	srv, send := harnessPages(t) // first, so that it closes after the browser
	browser := startBrowser(t)
	tab := newTab(t, browser)

	step(t, tab, "open the accessible page", chromedp.Navigate(srv.URL+"/good"))
	checkA11y(t, tab, axe, "/good")

	// The figure changes only when the server sends it: the event is sent
	// once the page's EventSource is connected (the send blocks until then).
	select {
	case send <- 1234567:
	case <-time.After(time.Minute):
		t.Fatal("the page never opened its event stream")
	}
	waitDOM(t, tab, "the live figure", `document.querySelector('.spend[data-scope="dept:eng"]').dataset.nano === "1234567"`)

	step(t, tab, "open the faulty page", chromedp.Navigate(srv.URL+"/bad"))
	vs, err := axeRun(tab, axe)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID+"/"+v.Impact)
	}
	slices.Sort(ids)
	if want := []string{"button-name/critical", "image-alt/critical"}; !slices.Equal(ids, want) {
		t.Errorf("axe-core on the faulty page: %v, want %v", ids, want)
	}

	path := filepath.Join(t.TempDir(), "bad.png")
	if err := writeScreenshot(tab, path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("screenshot: %v", err)
	}
}
