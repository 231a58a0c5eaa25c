package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console's browser tests drive Debian's chromium headless with
// chromedp. scripts/deps.sh installs chromium and axe-core; without them
// the tests skip, and fail when CI=true.

var updateScreenshots = flag.Bool("update-screenshots", false, "write a PNG of each console page the browser tests visit to docs/console/")

// axeCoreVersion is the axe-core that scripts/deps.sh installs under the
// cache directory.
const axeCoreVersion = "4.14.1"

// screenshotDir is where -update-screenshots writes, from this package's
// directory.
const screenshotDir = "../../docs/console"

// missingTool skips the test, or fails it when CI=true: a CI run cannot pass
// by skipping the browser tests.
func missingTool(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + ": run scripts/deps.sh"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// startBrowser starts headless chromium for the test and returns a
// chromedp context whose browser is running; every tab made from it by
// newTab has its own cookies. The browser stops when the test ends.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		missingTool(t, "no chromium on PATH")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// newTab opens a tab in a browser context of its own (its own cookies, as
// another person's browser) and closes it when the test ends.
func newTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// step runs the actions with a bound of a minute, and fails the test with
// what and the page's address when one fails.
func step(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := stepErr(tab, actions...); err != nil {
		loc, _ := chromedp.Run(tab, chromedp.Location())
		t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

func stepErr(tab context.Context, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// axeScript reads the axe.min.js that scripts/deps.sh installs under
// $TOLLGATE_CACHE (default the user's cache directory + /tollgate).
func axeScript(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("TOLLGATE_CACHE")
	if cache == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("no cache dir to find axe-core in: %v", err)
		}
		cache = filepath.Join(d, "tollgate")
	}
	path := filepath.Join(cache, "axe-core-"+axeCoreVersion, "node_modules", "axe-core", "axe.min.js")
	b, err := os.ReadFile(path)
	if err != nil {
		missingTool(t, "axe-core %s not installed at %s", axeCoreVersion, path)
	}
	return string(b)
}

// axeViolation is one rule axe-core found broken, as axe.run reports it.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any `json:"target"`
	} `json:"nodes"`
}

// axeRun injects axe-core into the tab's page (by the DevTools protocol,
// so the page's Content-Security-Policy needs no exception) and returns
// the serious and critical violations of its WCAG 2 A and AA rules and
// best practices.
func axeRun(tab context.Context, axe string) ([]axeViolation, error) {
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](axe)); err != nil {
		return nil, fmt.Errorf("inject axe-core: %w", err)
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`axe.run(document, {
		runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]},
		resultTypes: ["violations"]
	}).then(r => r.violations.filter(v => v.impact === "serious" || v.impact === "critical"))`, chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("run axe-core: %w", err)
	}
	var vs []axeViolation
	return vs, json.Unmarshal(raw, &vs)
}

// checkA11y fails the test when axe-core finds a serious or critical
// violation on the tab's page.
func checkA11y(t *testing.T, tab context.Context, axe, page string) {
	t.Helper()
	vs, err := axeRun(tab, axe)
	if err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	for _, v := range vs {
		var where []string
		for _, n := range v.Nodes {
			where = append(where, fmt.Sprint(n.Target...))
		}
		t.Errorf("%s: axe-core %s (%s): %s at %s", page, v.ID, v.Impact, v.Help, strings.Join(where, ", "))
	}
}

// screenshot takes a PNG of the whole page when the test runs with
// -update-screenshots and writes it to dir/name.png.
func screenshot(t *testing.T, tab context.Context, dir, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	if err := writeScreenshot(tab, filepath.Join(dir, name+".png")); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
}

func writeScreenshot(tab context.Context, path string) error {
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return err
	}
	if _, err := png.DecodeConfig(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("not a PNG: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// waitDOM waits until the JavaScript predicate is true, testing it again
// on every change of the page's DOM (never on a timer): a live figure is
// awaited by the change that shows it. The wait is bounded by a minute.
func waitDOM(t *testing.T, tab context.Context, what, predicate string) {
	t.Helper()
	step(t, tab, "wait for "+what, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(time.Minute)))
}
