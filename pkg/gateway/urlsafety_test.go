package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/valyala/fasthttp"
)

// lineUpstream is a raw-socket upstream that records the request line and
// body of each request exactly as they arrived, then answers 400 (a
// client error: the router neither retries nor falls back on it).
type lineUpstream struct {
	addr string
	mu   sync.Mutex
	got  []upstreamRequest
}

type upstreamRequest struct {
	line, body string
	header     textproto.MIMEHeader
}

func newLineUpstream(t *testing.T) *lineUpstream {
	ln := listen(t)
	u := &lineUpstream{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close() // the gateway keeps idle connections open
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); u.serve(conn) }()
		}
	}()
	return u
}

func (u *lineUpstream) serve(conn net.Conn) {
	defer conn.Close()
	tp := textproto.NewReader(bufio.NewReader(conn))
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(h.Get("Content-Length"))
		body := make([]byte, n)
		if _, err := io.ReadFull(tp.R, body); err != nil {
			return
		}
		u.mu.Lock()
		u.got = append(u.got, upstreamRequest{line: line, body: string(body), header: h})
		u.mu.Unlock()
		const answer = `{"error":{"message":"recorded","type":"invalid_request_error"}}`
		_, _ = io.WriteString(conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: "+
			strconv.Itoa(len(answer))+"\r\n\r\n"+answer)
	}
}

// take returns the requests received since the last call.
func (u *lineUpstream) take() []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	got := u.got
	u.got = nil
	return got
}

// TestUpstreamURLHostileModelNames sends model names an attacker with a
// valid token would try through a wildcard route of every provider kind
// and checks the exact request line the provider received (issue #17).
// Names reach a URL path only on azure (deployment), gemini (model
// resource) and bedrock (model id); there every name is one escaped path
// segment or is refused with 400 before any upstream call. On the other
// kinds the name travels in the JSON body and the request line is fixed.
// Behind the default wildcard_pattern, names outside it never leave the
// gateway.
func TestUpstreamURLHostileModelNames(t *testing.T) {
	up := newLineUpstream(t)
	base := "http://" + up.addr
	kinds := []struct {
		kind string
		// line is the request line for an escaped segment seg.
		line func(seg string) string
		// inURL: the name is placed in the URL path.
		inURL bool
	}{
		{kind: "openai", line: func(string) string { return "POST /v1/chat/completions HTTP/1.1" }},
		{kind: "mock", line: func(string) string { return "POST /v1/chat/completions HTTP/1.1" }},
		{kind: "anthropic", line: func(string) string { return "POST /v1/messages HTTP/1.1" }},
		{kind: "azure", inURL: true, line: func(seg string) string {
			return "POST /openai/deployments/" + seg + "/chat/completions?api-version=2024-10-21 HTTP/1.1"
		}},
		{kind: "gemini", inURL: true, line: func(res string) string {
			return "POST /v1beta/" + res + ":generateContent HTTP/1.1"
		}},
		{kind: "bedrock", inURL: true, line: func(seg string) string { return "POST /model/" + seg + "/converse HTTP/1.1" }},
	}
	names := []struct {
		name, model string
		// seg is the escaped path segment; "" where URL kinds refuse it.
		seg string
		// gemini, when set, is Gemini's resource path instead of
		// "models/"+seg (its ids have no "/"; "-" for a refusal).
		gemini string
		// strict: the default wildcard_pattern lets it through.
		strict bool
		// always: refused by every route, the pattern notwithstanding.
		always bool
	}{
		{name: "plain", model: "gemini-2.0-flash", seg: "gemini-2.0-flash", strict: true},
		{name: "dot dot path", model: "../../v1/files", seg: "..%2F..%2Fv1%2Ffiles", gemini: "-"},
		{name: "method and query", model: "x:streamGenerateContent?alt=sse&key=", seg: "x%3AstreamGenerateContent%3Falt%3Dsse%26key%3D"},
		{name: "fragment", model: "a#frag", seg: "a%23frag"},
		{name: "escaped slashes", model: "..%2f..%2fx", seg: "..%252f..%252fx"},
		{name: "colon", model: "claude-v2:1", seg: "claude-v2%3A1", strict: true},
		{name: "slash", model: "a/b", seg: "a%2Fb", gemini: "-", strict: true},
		{name: "gemini resource", model: "tunedModels/my-model", seg: "tunedModels%2Fmy-model", gemini: "tunedModels/my-model", strict: true},
		{name: "gemini resource with a path", model: "models/../files", seg: "models%2F..%2Ffiles", gemini: "-"},
		{name: "gemini resource, hostile id", model: "models/x:y?key=", seg: "models%2Fx%3Ay%3Fkey%3D", gemini: "models/x%3Ay%3Fkey%3D"},
		{name: "dot segment", model: "..", seg: ""},
		// Control characters and overlong names are refused on every
		// kind, whatever the pattern: the name would reach logs and
		// response headers.
		{name: "CR LF", model: "a\r\nHost: evil", seg: "", always: true},
		{name: "NUL", model: "a\x00b", seg: "", always: true},
		{name: "overlong", model: strings.Repeat("a", 600), seg: "", always: true},
		{name: "non-ASCII", model: "modèle-ü", seg: "mod%C3%A8le-%C3%BC"},
	}
	r := newRigFor(t, nil, base+"/v1", func(c *config.Config) {
		for _, k := range kinds {
			p := config.Provider{Name: "p-" + k.kind, Kind: k.kind, BaseURL: base + "/v1", APIKey: testProvKey}
			switch k.kind {
			case "azure", "anthropic", "gemini", "bedrock":
				p.BaseURL = base
			}
			if k.kind == "azure" {
				p.APIVersion = "2024-10-21"
			}
			if k.kind == "bedrock" {
				p.Region = "us-east-1"
			}
			c.Providers = append(c.Providers, p)
			target := []config.Target{{Provider: p.Name, Model: "*"}}
			c.Models = append(c.Models,
				config.Model{Name: k.kind + "/*", WildcardPattern: "(?s).*", Targets: target},
				config.Model{Name: k.kind + "-strict/*", Targets: target})
		}
		c.ApplyDefaults()
	})
	tok := r.token(nil)
	for _, k := range kinds {
		for _, n := range names {
			for _, strict := range []bool{false, true} {
				route := k.kind + "/"
				if strict {
					route = k.kind + "-strict/"
				}
				t.Run(route+n.name, func(t *testing.T) {
					model, _ := json.Marshal(route + n.model)
					resp := r.post("/v1/chat/completions", tok, `{"model":`+string(model)+`,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
					body := readBody(t, resp)
					got := up.take()
					seg := n.seg
					if k.kind == "gemini" && seg != "" {
						seg = "models/" + seg
						if n.gemini != "" {
							seg = n.gemini
						}
					}
					byPattern := n.always || strict && !n.strict
					if byPattern || k.inURL && (seg == "" || seg == "-") {
						if resp.StatusCode != 400 || len(got) != 0 {
							t.Fatalf("status %d, %d upstream requests (%v), want 400 before any call: %s", resp.StatusCode, len(got), got, body)
						}
						code := "invalid_url_value"
						if byPattern {
							code = codeInvalidModelName
						}
						errorShape(t, body, typeInvalidRequest, code)
						return
					}
					if len(got) != 1 {
						t.Fatalf("status %d, %d upstream requests, want 1: %s", resp.StatusCode, len(got), body)
					}
					if want := k.line(seg); got[0].line != want {
						t.Errorf("request line\n%q\nwant\n%q", got[0].line, want)
					}
					if strings.Contains(got[0].line, testProvKey) {
						t.Errorf("the provider key is in the request line %q", got[0].line)
					}
					if !k.inURL {
						if m := gjson.Get(got[0].body, "model"); m.Str != n.model {
							t.Errorf("upstream body model %q, want %q", m.Str, n.model)
						}
					}
				})
			}
		}
	}
}

// TestUpstreamAnswerShape: a provider that answers 200 with valid JSON of
// another shape than the endpoint promises is a malformed answer, 502
// upstream_malformed, never relayed as a success, and recorded as such in
// the request's one usage event (issue #17).
func TestUpstreamAnswerShape(t *testing.T) {
	const wrong = `{"id":"x","object":"something.else","usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(wrong)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	base := "http://" + ln.Addr().String()
	tests := []struct {
		name, kind, path, body string
		anthropicShape         bool
	}{
		{name: "chat", kind: "openai", path: "/v1/chat/completions", body: chatBody},
		{name: "completions", kind: "openai", path: "/v1/completions", body: `{"model":"mock-gpt","prompt":"hi"}`},
		{name: "embeddings", kind: "openai", path: "/v1/embeddings", body: `{"model":"mock-embed","input":"hi"}`},
		{name: "responses", kind: "openai", path: "/v1/responses", body: `{"model":"mock-gpt","input":"hi"}`},
		{name: "azure chat", kind: "azure", path: "/v1/chat/completions", body: chatBody},
		{name: "messages translated", kind: "openai", path: "/v1/messages", anthropicShape: true,
			body: `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`},
		{name: "messages native", kind: "anthropic", path: "/v1/messages", anthropicShape: true,
			body: `{"model":"mock-gpt","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAcctRig(t, func(c *config.Config) {
				p := &c.Providers[0]
				p.Kind, p.BaseURL = tc.kind, base+"/v1"
				switch tc.kind {
				case "azure":
					p.BaseURL, p.APIVersion = base, "2024-10-21"
				case "anthropic":
					p.BaseURL = base
				}
			})
			resp := a.post(tc.path, a.token(nil), tc.body)
			body := readBody(t, resp)
			if resp.StatusCode != 502 {
				t.Fatalf("status %d, want 502: %s", resp.StatusCode, body)
			}
			if tc.anthropicShape {
				if e := gjson.GetBytes(body, "error.type"); e.Str != "api_error" || !strings.Contains(string(body), "malformed") {
					t.Errorf("anthropic error body %s", body)
				}
			} else {
				errorShape(t, body, typeUpstream, "upstream_malformed")
			}
			ev := a.events(t, 1)[0]
			if ev.StatusCode != 502 || ev.ErrorType != "upstream_malformed" {
				t.Errorf("usage event status %d error %q, want 502 upstream_malformed", ev.StatusCode, ev.ErrorType)
			}
		})
	}
}
