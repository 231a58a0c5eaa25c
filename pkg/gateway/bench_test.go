package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/loadgen"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/openai"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

// fixedUpstream answers every request with body, allocation-free, so a
// benchmark counts the gateway's own allocations.
func fixedUpstream(b testing.TB, body []byte) string {
	ln := listen(b)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentType("application/json")
		ctx.Response.SetBodyRaw(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

var benchCompletion = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1764460800,"model":"mock-gpt","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the benchmark upstream"},"finish_reason":"stop"}],"usage":{"prompt_tokens":210,"completion_tokens":6,"total_tokens":216}}`)

// The other endpoints' upstream answers, in the shapes the mock sends.
var (
	benchResponse   = []byte(`{"id":"resp_1","object":"response","created_at":1764460800,"status":"completed","background":false,"error":null,"incomplete_details":null,"model":"mock-gpt","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello from the benchmark upstream"}]}],"parallel_tool_calls":true,"previous_response_id":null,"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":210,"input_tokens_details":{"cached_tokens":0},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":216},"metadata":{}}`)
	benchMessage    = []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-mock","content":[{"type":"text","text":"Hello from the benchmark upstream"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":210,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":6}}`)
	benchGenerate   = []byte(`{"candidates":[{"content":{"role":"model","parts":[{"text":"Hello from the benchmark upstream"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":210,"candidatesTokenCount":6,"totalTokenCount":216},"modelVersion":"gemini-mock","responseId":"r1"}`)
	benchModeration = []byte(`{"id":"modr-1","model":"omni-moderation-latest","results":[{"flagged":false,"categories":{"hate":false,"violence":false},"category_scores":{"hate":0.0001,"violence":0.0001}}]}`)
)

// BenchmarkNonStreamRequest measures one non-stream request through the
// gateway's handler (fiber routing, cached-token auth, parse, route, body
// edit, upstream call over loopback, response hand-off), without the client
// socket, on one endpoint of each adapter kind. The upstream answers a
// fixed body without allocating, so allocs/op are the gateway's (and its
// fasthttp client's). Expected allocs/op, measured on the 2-core bench
// machine (2026-12-02, about 22-40 µs/op on a busy machine):
//
//	same-model           3  chat, the provider's model is the one asked for
//	renamed-model        3  chat, the body's model rewritten
//	hedge-armed         14  chat with hedging on, the first call in time: the
//	                        cost of arming a hedge (a goroutine, a timer, a
//	                        copy of the body, and the record, which a leg
//	                        holds so it is not pooled) without making one;
//	                        models without hedging pay nothing for it
//	                        (same-model)
//	responses            3  /v1/responses to an openai-kind provider
//	messages-translated 14  /v1/messages to an openai-kind provider: the
//	                        body translated to chat and the answer back
//	responses-translated 13 /v1/responses to an anthropic-kind provider:
//	                        the body translated to chat and on to the
//	                        Messages API, the answer back twice (2026-12-07)
//	messages-native      8  /v1/messages to an anthropic-kind provider
//	gemini-translated   15  /v1beta/models/{model}:generateContent to an
//	                        openai-kind provider (2026-12-07, 86 µs/op as
//	                        messages-translated)
//	gemini-native       12  the same to a gemini-kind provider: the body
//	                        passed through, its translation made for
//	                        admission (2026-12-07, 50 µs/op)
//	moderations         10  /v1/moderations, a pass-through endpoint (its
//	                        record, which its body stream holds, included)
//
// Of same-model's 3 (a memory profile, 2026-12-01), the gateway makes the
// request id and the copy of the requested model's name; fasthttp's
// RequestCtx.Init in the loop below makes the third. The request record
// (some 2.5 KB: the parsed request and the endpoint adapter's state) comes
// from a pool when the request ends in its handler (release), 4 allocs and
// 2.6 KB per request before.
func BenchmarkNonStreamRequest(b *testing.B) {
	words := strings.Repeat("word ", 200)
	for _, tc := range []struct {
		name, path, body string
		answer           []byte
	}{
		{"same-model", "/v1/chat/completions", `{"model":"mock-gpt","messages":[{"role":"user","content":"` + words + `"}]}`, benchCompletion},
		{"renamed-model", "/v1/chat/completions", `{"model":"alias-gpt","messages":[{"role":"user","content":"` + words + `"}]}`, benchCompletion},
		{"hedge-armed", "/v1/chat/completions", `{"model":"hedged-gpt","messages":[{"role":"user","content":"` + words + `"}]}`, benchCompletion},
		{"responses", "/v1/responses", `{"model":"mock-gpt","input":"` + words + `"}`, benchResponse},
		{"messages-translated", "/v1/messages", `{"model":"mock-gpt","max_tokens":256,"messages":[{"role":"user","content":"` + words + `"}]}`, benchCompletion},
		{"responses-translated", "/v1/responses", `{"model":"claude-mock","input":"` + words + `"}`, benchMessage},
		{"messages-native", "/v1/messages", `{"model":"claude-mock","max_tokens":256,"messages":[{"role":"user","content":"` + words + `"}]}`, benchMessage},
		{"gemini-translated", "/v1beta/models/mock-gpt:generateContent", `{"contents":[{"role":"user","parts":[{"text":"` + words + `"}]}]}`, benchCompletion},
		{"gemini-native", "/v1beta/models/gemini-mock:generateContent", `{"contents":[{"role":"user","parts":[{"text":"` + words + `"}]}]}`, benchGenerate},
		{"moderations", "/v1/moderations", `{"model":"omni-moderation-latest","input":"` + words + `"}`, benchModeration},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := newRigFor(b, nil, fixedUpstream(b, tc.answer), func(c *config.Config) {
				c.Log.Requests = false
				mock := c.Providers[0]
				c.Providers = append(c.Providers, config.Provider{Name: "claude", Kind: config.KindAnthropic,
					BaseURL: strings.TrimSuffix(mock.BaseURL, "/v1"), APIKey: testProvKey, Timeouts: mock.Timeouts},
					config.Provider{Name: "gem", Kind: config.KindGemini,
						BaseURL: strings.TrimSuffix(mock.BaseURL, "/v1"), APIKey: testProvKey, Timeouts: mock.Timeouts})
				c.Models = append(c.Models,
					config.Model{Name: "gemini-mock", Targets: []config.Target{{Provider: "gem"}}},
					config.Model{Name: "hedged-gpt", Strategy: config.StrategyOrdered,
						Targets: []config.Target{{Provider: "mock", Model: "mock-gpt"}, {Provider: "renamed", Model: "mock-gpt"}},
						Hedge:   config.Hedge{After: "10s"}},
					config.Model{Name: "claude-mock", Targets: []config.Target{{Provider: "claude"}}},
					config.Model{Name: "omni-moderation-latest", Type: config.ModelTypeModeration, Targets: []config.Target{{Provider: "mock"}}})
				c.ApplyDefaults()
			})
			r.gw.logRequests = false
			body := []byte(tc.body)
			tok := r.token(nil)
			h := r.gw.Handler()
			var ctx fasthttp.RequestCtx
			var req fasthttp.Request
			benchPost(&req, tc.path, tok, body)
			addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
			run := func() {
				ctx.Init(&req, addr, nil)
				h(&ctx)
				// Body reads a streamed answer (pass-through) to its end, as
				// the server's write would; unread, the gateway would count
				// a client abort and drop the upstream connection.
				if out := ctx.Response.Body(); ctx.Response.StatusCode() != 200 || len(out) == 0 {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), out)
				}
			}
			measure(b, 100, len(body), run) // warm pools and the token cache
		})
	}
}

// BenchmarkServedRequest is same-model through the gateway's own server
// over a loopback socket, as in production, with a keep-alive client in
// the same process (its allocations count too). The server gives each
// connection's body buffers back after every response (ReduceMemoryUsage),
// and the client response takes the upstream body's buffer (SwapBody): the
// upstream response then takes a buffer from fasthttp's pool. That pool
// (bytebufferpool) sizes itself by the length of the buffers put back,
// from its 42,000th put on, so the warm-up runs past that, to the steady
// state of a long-running gateway. Expected: 3 allocs/op, about 80 B
// (2026-12-06). The 64KB case is a 64 KiB chat body of mixed text (the
// bench's large-64k scenario), the whole path at the same 3 allocs/op:
// most of the body arrives after the 8 KiB fasthttp reads with the
// headers, and limitBody reads it into a pooled buffer of its size class
// (bodybuf.go). Without that pool, with buffers given back, each large
// body grew a new buffer from fasthttp's pool in fresh pages: make bench
// measured 3x the CPU per request at 64 KB, 5x at 512 KB.
func BenchmarkServedRequest(b *testing.B) {
	large, err := loadgen.BuildBody(loadgen.BodySpec{Model: "mock-gpt", HistoryKB: 64, MixedText: true, PromptWords: 16})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body []byte
		warm int
	}{
		{"200-words", []byte(`{"model":"mock-gpt","messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`), 45_000},
		{"64KB", large, 2_000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := newRigFor(b, nil, fixedUpstream(b, benchCompletion), func(c *config.Config) { c.Log.Requests = false; c.BodyLimit = 1 << 20 })
			r.gw.logRequests = false
			hc := &fasthttp.HostClient{Addr: strings.TrimPrefix(r.url, "http://")}
			var req fasthttp.Request
			var resp fasthttp.Response
			benchPost(&req, r.url+"/v1/chat/completions", r.token(nil), tc.body)
			run := func() {
				if err := hc.Do(&req, &resp); err != nil || resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), benchCompletion) {
					b.Fatalf("%v: status %d: %s", err, resp.StatusCode(), resp.Body())
				}
			}
			measure(b, tc.warm, len(tc.body), run) // the token cache, and the body pools past their sizing
		})
	}
}

// benchPost makes req a client's POST of a JSON body to uri with token.
func benchPost(req *fasthttp.Request, uri, token string, body []byte) {
	req.Header.SetMethod("POST")
	req.SetRequestURI(uri)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
}

// measure runs run warm times unmeasured, then b.N times, reporting
// allocations and bodyLen bytes per op.
func measure(b *testing.B, warm, bodyLen int, run func()) {
	for range warm {
		run()
	}
	b.ReportAllocs()
	b.SetBytes(int64(bodyLen))
	b.ResetTimer()
	for range b.N {
		run()
	}
}

// BenchmarkParseRequest is the body scan alone (200-word prompt).
func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var info reqInfo
	for i := 0; i < b.N; i++ {
		if err := parseRequest(body, epChat, &info); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParsePassJSON is the one pass over a pass-through JSON body
// (an image request and a speech request, whose input's characters are
// counted). Expected: 0 allocs/op (an input written with escapes costs
// one, its decoded text). Measured 2026-12-02 on the loaded 2-core
// machine: image 0.4-0.5 µs, speech 2.8-4.2 µs; the gjson validation and
// walk before took 1.8-2.1 µs and 7.8-9.3 µs, with 1 alloc.
func BenchmarkParsePassJSON(b *testing.B) {
	for _, tc := range []struct {
		name string
		pr   *passRoute
		body string
	}{
		{"image", &passRoute{unit: unitImage}, `{"model":"mock-image","prompt":"` + strings.Repeat("a cat on a mat ", 40) + `","n":3,"size":"1024x1024"}`},
		{"speech", &passRoute{unit: unitCharacter}, `{"model":"mock-tts","voice":"alloy","input":"` + strings.Repeat("héllo wörld ", 100) + `"}`},
	} {
		body := []byte(tc.body)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, aerr := parsePassJSON(body, tc.pr); aerr != nil {
					b.Fatal(aerr)
				}
			}
		})
	}
}

// BenchmarkParseLargeRequest is the body scan of agent and RAG sized chat
// requests (issue #18): a long history of user and assistant turns with
// escapes and non-ASCII text, as loadgen's -history-mixed sends it (1.6,
// 64 and 512 KiB bodies). Expected: 0 allocs/op at every size. Measured
// on the 2-core bench machine (2026-12-01): the earlier parse (depth
// check, gjson validation, UTF-8 check, gjson walk of the members) ran at
// about 500 MB/s (128 µs at 64 KB, 1 ms at 512 KB); rawjson.Scan runs at
// about 1,650 MB/s (39 µs, 320 µs). This text has a quote, backslash or
// non-ASCII character every 7 bytes; plain ASCII prompts scan at about
// 3 GB/s (BenchmarkParseRequest). Checking UTF-8 a word at a time with an
// automaton made the scan about 1.2x faster on this text (1.45x on
// accented and CJK text alone; rawjson's BenchmarkScan has the figures).
// Built with GOEXPERIMENT=simd (the vector string reader and one UTF-8
// check of the whole body; 2026-12-02, quiet machine, best of 3 runs
// interleaved with the portable build): 1.6 KiB 1,800 -> 3,133 MB/s, 64
// KiB 1,819 -> 4,308 MB/s (36 -> 15 µs), 512 KiB 1,800 -> 3,853 MB/s
// (291 -> 136 µs), 0 allocs/op in both.
func BenchmarkParseLargeRequest(b *testing.B) {
	for _, kb := range []int{1, 64, 512} {
		body, err := loadgen.BuildBody(loadgen.BodySpec{Model: "mock-gpt", HistoryKB: kb, MixedText: true, PromptWords: 16})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strconv.Itoa(kb)+"KB", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var info reqInfo
			for b.Loop() {
				if err := parseRequest(body, epChat, &info); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var benchChunk = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764460800,"model":"mock-gpt","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")

// BenchmarkRelayChunk measures relaying one upstream SSE event: split,
// inspect (validity, finish_reason, usage, error) and hand to fasthttp's
// writer. Expected: 0 allocs/op.
func BenchmarkRelayChunk(b *testing.B) {
	const perStream = 64
	stream := bytes.Repeat(benchChunk, perStream)
	src := bytes.NewReader(stream)
	r := testRelay(b, src)
	p := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchChunk)))
	b.ResetTimer()
	events := 0
	for events < b.N {
		n, err := r.Read(p)
		if errors.Is(err, io.EOF) {
			// The source ran dry (no [DONE]): start the stream again.
			src.Reset(stream)
			r.sc.Reset(src)
			r.done, r.failure = false, nil
			continue
		}
		events += bytes.Count(p[:n], []byte("\n\n"))
	}
}

// testRelay is a relay over src with the OpenAI stream decoder, for
// benchmarks and fuzzing without sockets.
func testRelay(tb testing.TB, src io.Reader) *relay {
	prov, err := openai.New(openai.Options{Name: "test", BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		tb.Fatal(err)
	}
	rt := &route{up: &upstream{name: "test", prov: prov}}
	r := &relay{sc: sse.NewReader(src, 8<<10, maxEventSize), body: src, out: make([]byte, 0, 8<<10), primed: true,
		rec: &record{route: rt, start: time.Now()}, rt: rt, idle: time.Minute, deadline: time.Now().Add(time.Hour),
		stream: prov.Stream(&providers.Call{IncludeUsage: true})}
	r.fr = r.sc
	return r
}

// FuzzParseRequest: any body either gets a 400-class answer or parses, and
// a parsed body with a renamed model is still valid JSON naming the new model.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{chatBody, `{"model":"m","messages":[1],"stream":true}`, `{"model":"a\"b","prompt":"x"}`, `[]`, `{"model":1}`, "{\"model\":\"m\",\"messages\":[{}],\"model\":\"x\"}"} {
		f.Add([]byte(s))
	}
	prov, err := openai.New(openai.Options{Name: "fuzz", BaseURL: "http://127.0.0.1:1/v1", APIKey: "k"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []endpoint{epChat, epCompletions, epEmbeddings} {
			var info reqInfo
			aerr := parseRequest(body, ep, &info)
			if aerr != nil {
				if aerr.Status != 400 {
					t.Fatalf("status %d for a bad body", aerr.Status)
				}
				continue
			}
			if !gjson.ValidBytes(body) || info.model == "" {
				t.Fatalf("accepted an invalid body: %q", body)
			}
			var req fasthttp.Request
			call := providers.Call{Endpoint: ep, Body: body, Model: "up/model-é", ModelRaw: info.modelRaw, ModelIdx: info.modelIdx,
				ModelJSON: jsonString("up/model-é"), Stream: info.stream, IncludeUsage: info.includeUsage,
				StreamOptionsRaw: info.streamOpts, StreamOptionsIdx: info.streamOptIdx, MaxTokens: info.maxTokens, ClampMaxTokens: 77}
			if err := prov.Build(&req, &call); err != nil {
				t.Fatal(err)
			}
			out := req.Body()
			if !gjson.ValidBytes(out) {
				t.Fatalf("edited body is invalid JSON: %q -> %q", body, out)
			}
			res := gjson.ParseBytes(out)
			if res.Get("model").String() != "up/model-é" {
				t.Fatalf("edited body lacks the new model: %q", out)
			}
			if ep != epEmbeddings && info.stream && !res.Get("stream_options.include_usage").Bool() {
				t.Fatalf("edited stream body does not ask for usage: %q", out)
			}
			if mct := res.Get("max_completion_tokens"); !mct.Exists() && res.Get("max_tokens").Int() != 77 || mct.Exists() && mct.Int() != 77 {
				t.Fatalf("edited body lacks the clamped max tokens: %q", out)
			}
		}
	})
}

// FuzzRelay feeds arbitrary upstream bytes through the relay: it must end,
// never panic, and send the client only whole events whose data is JSON or
// [DONE] (anything else becomes one error event).
func FuzzRelay(f *testing.F) {
	f.Add([]byte(string(benchChunk) + "data: [DONE]\n\n"))
	f.Add([]byte("data: {oops\n\n"))
	f.Add([]byte(": ping\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n"))
	f.Add([]byte("garbage"))
	f.Add([]byte("data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := testRelay(t, bytes.NewReader(in))
		var out []byte
		p := make([]byte, 100)
		for i := 0; ; i++ {
			if i > 10*len(in)+100 {
				t.Fatal("relay did not end")
			}
			n, err := r.Read(p)
			out = append(out, p[:n]...)
			if errors.Is(err, io.EOF) {
				break
			}
		}
		rd := sse.NewReader(bytes.NewReader(out), 64, 1<<20)
		for {
			ev, ok := rd.Next()
			if !ok {
				if rd.Fill() != nil {
					break
				}
				continue
			}
			_, data, _ := sse.Parse(ev, nil)
			if len(data) > 0 && string(data) != "[DONE]" && !gjson.ValidBytes(data) {
				t.Fatalf("client got invalid data %q from input %q", data, in)
			}
		}
		if rest := rd.Buffered(); len(rest) > 0 {
			t.Fatalf("client got a partial event %q", rest)
		}
	})
}
