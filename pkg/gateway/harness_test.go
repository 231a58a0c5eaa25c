package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/owner"
)

const (
	testSecret   = "test-secret-for-the-gateway-tests-0123456789"
	testProvKey  = "sk-test-PROVIDER-KEY-must-never-leak-42"
	testIssuer   = "tollgate-test"
	testAudience = "tollgate"
)

// rig is a gateway in front of a mock upstream, both on loopback sockets.
type rig struct {
	t    testing.TB
	gw   *Gateway
	url  string
	mock *mockllm.Server
	logs *syncBuffer
	cfg  *config.Config
}

// syncBuffer collects log output from concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// testAuthYAML is the auth section of the test configs: the issuer the
// rig's tokens are signed for.
const testAuthYAML = `auth:
  issuers:
    - name: test
      issuer: ` + testIssuer + `
      audience: ` + testAudience + `
      algorithms: [HS256]
      keys:
        - {kid: k1, secret: ` + testSecret + `}
`

// testConfig is the gateway config of the rig; mutate lets a test adjust it.
func testConfig(mockURL string) string {
	return `
listen: 127.0.0.1:0
body_limit: 65536
log: {format: json, level: debug, requests: true}
` + testAuthYAML + `providers:
  - name: mock
    kind: openai
    base_url: ` + mockURL + `
    api_key: ` + testProvKey + `
    timeouts: {connect: 5s, first_byte: 2s, idle: 1500ms, total: 3s}
  - name: renamed
    kind: openai
    base_url: ` + mockURL + `
    api_key: ` + testProvKey + `
  - name: nokey
    kind: openai
    base_url: ` + mockURL + `
    api_key: ${TOLLGATE_TEST_UNSET_KEY}
  - name: dead
    kind: openai
    base_url: http://127.0.0.1:1/v1
    api_key: x
models:
  - name: mock-gpt
    targets: [{provider: mock}]
  - name: mock-embed
    type: embeddings
    targets: [{provider: mock}]
  - name: alias-gpt
    targets: [{provider: renamed, model: upstream-gpt}]
  - name: keyless
    targets: [{provider: nokey}]
  - name: dead-gpt
    targets: [{provider: dead}]
`
}

func newRig(t testing.TB, mutate func(*config.Config)) *rig {
	t.Helper()
	mock := mockllm.New(mockllm.Config{})
	mln := listen(t)
	go func() { _ = mock.Serve(mln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	mockURL := "http://" + mln.Addr().String() + "/v1"
	return newRigFor(t, mock, mockURL, mutate)
}

func newRigFor(t testing.TB, mock *mockllm.Server, upstreamURL string, mutate func(*config.Config)) *rig {
	t.Helper()
	return newRigOn(t, listen(t), mock, upstreamURL, mutate)
}

// newRigOn is newRigFor with the gateway serving on ln.
func newRigOn(t testing.TB, ln net.Listener, mock *mockllm.Server, upstreamURL string, mutate func(*config.Config)) *rig {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfig(upstreamURL)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(cfg)
	}
	v, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	var own owners
	if cfg.FilesProvider != "" {
		own = startOwners(t)
	}
	gw, err := New(Options{Config: cfg, Verifier: v, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Owners: own})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return &rig{t: t, gw: gw, url: "http://" + ln.Addr().String(), mock: mock, logs: logs, cfg: cfg}
}

// token mints a valid token; mutate adjusts the options.
func (r *rig) token(mutate func(*auth.MintOptions)) string {
	r.t.Helper()
	return r.tokenAt(time.Now(), mutate)
}

// tokenAt mints a token as if issued at now (iat and nbf), valid one hour.
func (r *rig) tokenAt(now time.Time, mutate func(*auth.MintOptions)) string {
	r.t.Helper()
	o := auth.MintOptions{Issuer: testIssuer, Audience: testAudience, Subject: "alice", Dept: "research",
		Team: "nlp", Project: "bench", TTL: time.Hour, KID: "k1", Key: []byte(testSecret)}
	if mutate != nil {
		mutate(&o)
	}
	tok, err := auth.Mint(o, now)
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 20 * time.Second}

// post sends body to path with the given bearer token ("" for none).
func (r *rig) post(path, token, body string, headers ...string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.url+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

func readBody(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sseEvent is one event read by the test client, with its arrival time.
type sseEvent struct {
	data string
	at   time.Time
}

// readEvents reads data events until the body ends.
func readEvents(t testing.TB, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, sseEvent{data: d, at: time.Now()})
		}
	}
	return out
}

// errorShape checks an OpenAI error body: every key present, and the type
// and code expected.
func errorShape(t testing.TB, body []byte, wantType, wantCode string) string {
	t.Helper()
	var e struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Errorf("error body lacks %q: %s", k, body)
		}
	}
	var typ, code, msg string
	_ = json.Unmarshal(e.Error["type"], &typ)
	_ = json.Unmarshal(e.Error["code"], &code)
	_ = json.Unmarshal(e.Error["message"], &msg)
	if typ != wantType || code != wantCode {
		t.Errorf("error type/code = %s/%s, want %s/%s (%s)", typ, code, wantType, wantCode, body)
	}
	if msg == "" {
		t.Errorf("error message is empty: %s", body)
	}
	return msg
}

// startOwners runs an owner store on its own NATS server, for a rig that
// serves files and batches.
func startOwners(t testing.TB) *owner.Store {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	return startOwnersOn(t, js)
}

// startOwnersOn runs an owner store on js until the test ends.
func startOwnersOn(t testing.TB, js jetstream.JetStream) *owner.Store {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	s, err := owner.Start(ctx, wgGroup{&wg}, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
