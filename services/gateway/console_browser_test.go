package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// consoleRig is a gateway (the built binary) with its console on the
// admin listener, the budget service applying spend to the totals the
// console shows, mockllm upstream and the OpenID Provider
// (scripts/oidc-provider) the console signs in with, each a process.
type consoleRig struct {
	gw, admin string // addresses of the gateway's listeners
	ui        string // the console's base URL, http://ADMIN/ui
}

// The test users of the OpenID Provider: alice's role claim (a string)
// and bob's groups claim (a list) map to console roles by the config's
// console.roles.
const (
	consoleAdmin     = "alice" // role admin, dept eng
	consoleDeptAdmin = "bob"   // in group tollgate-dept-admins (role dept-admin), dept sales
	consolePassword  = "console-test-password"
)

func startConsoleRig(ctx context.Context, t *testing.T) consoleRig {
	t.Helper()
	bin := buildPrograms(ctx, t, "budget", "mockllm", "../../scripts/oidc-provider")
	var env []string
	if consoleHistory {
		buildProgram(ctx, t, filepath.Join(bin, "gateway"), "../gateway", "-tags", "clickhouse")
		buildProgram(ctx, t, filepath.Join(bin, "analytics"), "../analytics")
		env = []string{"TOLLGATE_CLICKHOUSE=" + chtest.Start(t)}
	} else {
		buildProgram(ctx, t, filepath.Join(bin, "gateway"), "../gateway")
	}
	ns := natstest.Start(t)
	mockAddr, gwAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	startProgram(t, filepath.Join(bin, "mockllm"), "-listen", mockAddr)
	waitHTTP(ctx, t, "http://"+mockAddr+"/stats")

	const clientID, clientSecret = "tollgate-console", "console-client-secret-0123456789"
	redirect := "http://" + adminAddr + "/ui/callback"
	iss := startIssuer(ctx, t, filepath.Join(bin, "oidc-provider"),
		"-listen", "127.0.0.1:0", "-client-id", clientID, "-client-secret", clientSecret, "-redirect-uri", redirect,
		"-user", "sub="+consoleAdmin+",password="+consolePassword+",email=alice@example.test,name=Alice,dept=eng,role=tollgate-admin",
		"-user", "sub="+consoleDeptAdmin+",password="+consolePassword+",email=bob@example.test,name=Bob,dept=sales,groups=staff|tollgate-dept-admins")

	dir := t.TempDir()
	secretFile := filepath.Join(dir, "console-client-secret")
	if err := os.WriteFile(secretFile, []byte(clientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tollgate.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: %q
admin: {listen: %q}
log: {format: json, level: info, requests: false}
auth:
  issuers:
    - name: example-sso
      discovery_url: %q
      allow_http: true
      algorithms: [RS256]
console:
  oidc: {issuer: example-sso, client_id: %q, client_secret_file: %q, redirect_url: %q}
  roles:
    - {claim: role, value: tollgate-admin, role: admin}
    - {claim: groups, value: tollgate-dept-admins, role: dept-admin}
  dept_claim: dept
providers:
  - {name: mock, kind: openai, base_url: "http://%s/v1", api_key: upstream-key}
models:
  - {name: mock-gpt, targets: [{provider: mock}]}
prices:
  mock-gpt: {input: "1", output: "2"}
budgets:
  - {scope: dept, value: eng, amount_usd: "100", period: month}
  - {scope: dept, value: sales, amount_usd: "50", period: month}
nats: {url: %q}
usage: {spool_dir: %q}
`, gwAddr, adminAddr, iss+"/.well-known/openid-configuration", clientID, secretFile, redirect,
		mockAddr, ns.ClientURL(), filepath.Join(dir, "spool"))), 0o600); err != nil {
		t.Fatal(err)
	}
	startProgramEnv(t, env, filepath.Join(bin, "gateway"), "-config", cfg)
	waitHTTP(ctx, t, "http://"+gwAddr+"/readyz")
	startProgram(t, filepath.Join(bin, "budget"), "-config", cfg)
	if consoleHistory {
		startProgramEnv(t, env, filepath.Join(bin, "analytics"), "-config", cfg, "-batch-interval", "100ms")
	}
	return consoleRig{gw: gwAddr, admin: adminAddr, ui: "http://" + adminAddr + "/ui"}
}

// startIssuer starts the OpenID Provider program and returns the issuer
// URL it prints when it is ready.
func startIssuer(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("oidc-provider stderr:\n%s", stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		iss, ok := strings.CutPrefix(strings.TrimSpace(l), "issuer ")
		if !ok {
			t.Fatalf("oidc-provider printed %q, want its issuer URL", l)
		}
		return iss
	case <-ctx.Done():
		t.Fatal("oidc-provider never printed its issuer URL")
		return ""
	}
}

// signIn signs user in through the console's sign-in page and the OpenID
// Provider's login form, and returns once the console shows the user.
// With shots, it checks and photographs the sign-in page.
func (r consoleRig) signIn(t *testing.T, tab context.Context, user, axe string, shots bool) {
	t.Helper()
	step(t, tab, "open the sign-in page", chromedp.Navigate(r.ui+"/login"))
	if shots {
		checkA11y(t, tab, axe, "/ui/login")
		screenshot(t, tab, screenshotDir, "login")
	}
	step(t, tab, "sign in as "+user,
		chromedp.Click(chromedp.CSS(`#login-oidc`)),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), user),
		chromedp.SendKeys(chromedp.ID("password"), consolePassword),
		chromedp.Submit(chromedp.ID("password")),
		chromedp.WaitVisible(chromedp.ID("user")))
	who, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("user")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(who, user) {
		t.Fatalf("signed in as %s, the console shows %q", user, who)
	}
}

// visit opens a console page, checks its status and its accessibility,
// and photographs it as shot (none when shot is empty).
func (r consoleRig) visit(t *testing.T, tab context.Context, axe, path, shot string, status int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(r.ui+path))
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	if resp.Status != status {
		t.Fatalf("%s answered %d, want %d", path, resp.Status, status)
	}
	checkA11y(t, tab, axe, "/ui"+path)
	if shot != "" {
		screenshot(t, tab, screenshotDir, shot)
	}
}

// waitFor opens the console page at path again until it has an element
// matching sel (rows the analytics service loads a moment later), bounded
// by a minute.
func (r consoleRig) waitFor(t *testing.T, tab context.Context, path, sel string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		step(t, tab, "open "+path, chromedp.Navigate(r.ui+path))
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %s", path, sel)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// chat sends one chat completion with the API key and returns its status.
func (r consoleRig) chat(ctx context.Context, t *testing.T, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.gw+"/v1/chat/completions",
		strings.NewReader(`{"model":"mock-gpt","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// acceptDialogs accepts every confirm() the tab's page opens (a revoke
// may ask first), until the tab closes.
func acceptDialogs(tab context.Context) {
	dialogs := chromedp.Events(tab, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Run(tab, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
				_, err := cdp.Call(ctx, tg, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
				return chromedp.Void{}, err
			})
		}
	}()
}

// TestConsoleInBrowser (issue #43) drives the console in headless
// chromium against a gateway, its budget service and a real OpenID
// Provider, all processes: an admin signs in through the provider's login
// form, creates an API key on the Keys page and uses its secret against
// /v1/chat/completions, watches the department's spend rise on the
// overview (pushed by server-sent events, awaited as a DOM change),
// revokes the key and sees 401; a dept-admin of another department is
// refused that department's budget page with the 403 page. Every page
// passes axe-core (no serious or critical violation); with
// -update-screenshots each is written to docs/console/.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, budget, mockllm and OpenID Provider programs")
	}
	axe := axeScript(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rig := startConsoleRig(ctx, t)
	browser := startBrowser(t)

	admin := newTab(t, browser)
	acceptDialogs(admin)
	rig.signIn(t, admin, consoleAdmin, axe, true)

	// A key for dept eng, made on the Keys page; its secret is shown once.
	rig.visit(t, admin, axe, "/keys", "keys", 200)
	step(t, admin, "create a key",
		chromedp.SetValue(chromedp.CSS(`#key-create-form [name="name"]`), "browser-test"),
		chromedp.SetValue(chromedp.CSS(`#key-create-form [name="dept"]`), "eng"),
		chromedp.SetValue(chromedp.CSS(`#key-create-form [name="team"]`), "web"),
		chromedp.SetValue(chromedp.CSS(`#key-create-form [name="sub"]`), "browser-job"),
		chromedp.Submit(chromedp.CSS(`#key-create-form [name="name"]`)),
		chromedp.WaitVisible(chromedp.ID("new-key-secret")))
	secret, err := chromedp.Run(admin, chromedp.Text(chromedp.ID("new-key-secret")))
	if err != nil {
		t.Fatal(err)
	}
	secret = strings.TrimSpace(secret)
	id, ok := strings.CutPrefix(secret, "tg-")
	if !ok || len(id) < 17 || id[16] != '_' {
		t.Fatalf("#new-key-secret shows %q, want a tg- key", secret)
	}
	id = id[:16]
	checkA11y(t, admin, axe, "/ui/keys (new key)")
	if code := rig.chat(ctx, t, secret); code != 200 {
		t.Fatalf("a request with the new key: %d, want 200", code)
	}

	// The overview's figure for dept eng rises after requests, pushed live.
	rig.visit(t, admin, axe, "/", "", 200)
	const spendEng = `document.querySelector('.spend[data-scope="dept:eng"]')`
	before, err := chromedp.Run(admin, chromedp.Evaluate[string](spendEng+`?.dataset.nano ?? "0"`))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code := rig.chat(ctx, t, secret); code != 200 {
			t.Fatalf("a request with the new key: %d, want 200", code)
		}
	}
	waitDOM(t, admin, "dept eng's spend above "+before,
		fmt.Sprintf(`%s !== null && BigInt(%s.dataset.nano) > %sn`, spendEng, spendEng, before))

	// The other pages, each checked and photographed.
	rig.visit(t, admin, axe, "/budgets?scope=dept:eng", "budgets", 200)
	if consoleHistory {
		rig.waitFor(t, admin, "/requests", `#requests-table tr[data-request-id]`)
	}
	rig.visit(t, admin, axe, "/requests", "requests", 200)
	if !consoleHistory {
		step(t, admin, "the requests page's error state without ClickHouse", chromedp.WaitVisible(chromedp.CSS(".error-state")))
	} else {
		reqID, err := chromedp.Run(admin, chromedp.Evaluate[string](`document.querySelector("#requests-table tr[data-request-id]").dataset.requestId`))
		if err != nil {
			t.Fatal(err)
		}
		rig.visit(t, admin, axe, "/requests/"+reqID, "request", 200)
	}
	rig.visit(t, admin, axe, "/", "overview", 200) // photographed with the history in
	rig.visit(t, admin, axe, "/models", "models", 200)
	rig.visit(t, admin, axe, "/audit", "audit", 200)
	audit, err := chromedp.Run(admin, chromedp.Text(chromedp.ID("audit-table")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(audit, consoleAdmin) || !strings.Contains(audit, "key.created") {
		t.Errorf("the audit log shows no key.created by %s:\n%s", consoleAdmin, audit)
	}

	// Revoked on the Keys page, the key is refused.
	rig.visit(t, admin, axe, "/keys", "keys", 200)
	row := fmt.Sprintf(`tr[data-key-id="%s"]`, id)
	if _, err := chromedp.RunResponse(admin, chromedp.Click(chromedp.CSS(row+" button.revoke"))); err != nil {
		t.Fatalf("revoke the key: %v", err)
	}
	step(t, admin, "the key's row marked revoked", chromedp.WaitVisible(chromedp.CSS(row+`[data-status="revoked"]`)))
	if code := rig.chat(ctx, t, secret); code != 401 {
		t.Fatalf("a request with the revoked key: %d, want 401", code)
	}

	// A dept-admin of sales is refused dept eng's budgets.
	sales := newTab(t, browser)
	rig.signIn(t, sales, consoleDeptAdmin, axe, false)
	rig.visit(t, sales, axe, "/budgets?scope=dept:eng", "refused", 403)
	refused, err := chromedp.Run(sales, chromedp.Text(chromedp.CSS(".error-state")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused, "not allowed") {
		t.Errorf("the 403 page says %q, want \"not allowed\"", refused)
	}
	rig.visit(t, sales, axe, "/budgets?scope=dept:sales", "budgets-dept-admin", 200)
	rig.visit(t, sales, axe, "/keys?dept=eng", "", 403)
	rig.visit(t, sales, axe, "/keys", "", 200)
	if n, err := chromedp.Run(sales, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", row))); err != nil || n != 0 {
		t.Errorf("a dept-admin of sales sees dept eng's key (%d rows, %v)", n, err)
	}

	// Signed out, the console asks for a sign-in again.
	step(t, sales, "sign out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("login-oidc")))
	resp, err := chromedp.Run(sales, chromedp.NavigateResponse(rig.ui+"/"))
	if err != nil {
		t.Fatal(err)
	}
	if loc, _ := chromedp.Run(sales, chromedp.Location()); !strings.Contains(loc, "/ui/login") {
		t.Errorf("after sign-out /ui/ led to %s (status %d), want the sign-in page", loc, resp.Status)
	}
}
