package tracing

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

var (
	_ HeaderGetter = (*fasthttp.RequestHeader)(nil)
	_ HeaderSetter = (*fasthttp.RequestHeader)(nil)
)

// clearEnv unsets the variables that would switch tracing on from outside.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
	for _, k := range []string{"ENDPOINT", "HEADERS", "TIMEOUT", "COMPRESSION", "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"} {
		t.Setenv("OTEL_EXPORTER_OTLP_"+k, "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_"+k, "")
	}
}

func memTracer(t *testing.T) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	tr := newTracer(tp)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]string {
	m := make(map[attribute.Key]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

func TestRequestWithAttempts(t *testing.T) {
	const (
		parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentSpan  = "00f067aa0ba902b7"
	)
	tests := []struct {
		name      string
		incoming  string // traceparent sent by the client; "" for none
		attempts  int
		continued bool // the request span's parent is the incoming one
		sampled   bool
	}{
		{name: "new trace, one attempt", attempts: 1, sampled: true},
		{name: "continued trace, three attempts", incoming: "00-" + parentTrace + "-" + parentSpan + "-01", attempts: 3, continued: true, sampled: true},
		{name: "continued unsampled trace", incoming: "00-" + parentTrace + "-" + parentSpan + "-00", attempts: 2, continued: true},
		{name: "malformed traceparent starts a new trace", incoming: "00-zz-yy-01", attempts: 1, sampled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, exp := memTracer(t)
			var in fasthttp.RequestHeader
			if tc.incoming != "" {
				in.Set("traceparent", tc.incoming)
			}
			ctx, rs := tr.StartRequest(context.Background(), &in, "/v1/chat/completions", "req-1")
			reqSC := trace.SpanContextFromContext(ctx)
			continued := tc.continued
			if continued && reqSC.TraceID().String() != parentTrace {
				t.Fatalf("request trace id = %s, want %s", reqSC.TraceID(), parentTrace)
			}
			var attemptIDs []trace.SpanID
			for i := 1; i <= tc.attempts; i++ {
				actx, as := tr.StartAttempt(ctx, "openai", "mock-gpt", i)
				var out fasthttp.RequestHeader
				tr.Inject(actx, &out)
				asc := trace.SpanContextFromContext(actx)
				flags := "-00"
				if tc.sampled {
					flags = "-01"
				}
				want := "00-" + reqSC.TraceID().String() + "-" + asc.SpanID().String() + flags
				if got := string(out.Peek("traceparent")); got != want {
					t.Errorf("attempt %d injected traceparent %q, want %q", i, got, want)
				}
				attemptIDs = append(attemptIDs, asc.SpanID())
				as.SetGenAI(GenAI{System: "openai", Operation: "chat", RequestModel: "mock-gpt",
					ResponseModel: "mock-gpt-2024", InputTokens: 12, OutputTokens: 7})
				if i < tc.attempts {
					as.SetStatus(503, "upstream_unavailable")
				} else {
					as.SetStatus(200, "")
				}
				as.End()
			}
			rs.SetGenAI(GenAI{System: "openai", Operation: "chat", RequestModel: "mock-gpt",
				ResponseModel: "mock-gpt-2024", InputTokens: 12, OutputTokens: 7})
			rs.SetStatus(200, "")
			rs.End()

			spans := exp.GetSpans()
			if !tc.sampled {
				if len(spans) != 0 {
					t.Fatalf("exported %d spans of an unsampled trace, want 0", len(spans))
				}
				return
			}
			if len(spans) != tc.attempts+1 {
				t.Fatalf("exported %d spans, want %d", len(spans), tc.attempts+1)
			}
			req := spans[len(spans)-1]
			if req.Name != "/v1/chat/completions" || req.SpanKind != trace.SpanKindServer {
				t.Errorf("request span %q kind %v, want /v1/chat/completions server", req.Name, req.SpanKind)
			}
			if continued && req.Parent.SpanID().String() != parentSpan {
				t.Errorf("request parent = %s, want %s", req.Parent.SpanID(), parentSpan)
			}
			if !continued && req.Parent.IsValid() {
				t.Errorf("request span has parent %s, want a root span", req.Parent.SpanID())
			}
			ra := attrs(req.Attributes)
			for k, v := range map[attribute.Key]string{"tollgate.request.id": "req-1", keyResponseModel: "mock-gpt-2024",
				keyInputTokens: "12", keyOutputTokens: "7", keyStatusCode: "200", "http.route": "/v1/chat/completions"} {
				if ra[k] != v {
					t.Errorf("request %s = %q, want %q", k, ra[k], v)
				}
			}
			if req.Status.Code == codes.Error {
				t.Errorf("request span status error, want unset")
			}
			for i, s := range spans[:tc.attempts] {
				if s.Name != "chat mock-gpt" || s.SpanKind != trace.SpanKindClient {
					t.Errorf("attempt span %q kind %v, want \"chat mock-gpt\" client", s.Name, s.SpanKind)
				}
				if s.Parent.SpanID() != req.SpanContext.SpanID() || s.SpanContext.SpanID() != attemptIDs[i] {
					t.Errorf("attempt %d parent %s, want request span %s", i+1, s.Parent.SpanID(), req.SpanContext.SpanID())
				}
				a := attrs(s.Attributes)
				want := map[attribute.Key]string{keySystem: "openai", keyProvider: "openai", keyOperation: "chat",
					keyRequestModel: "mock-gpt", keyResponseModel: "mock-gpt-2024", keyInputTokens: "12",
					keyOutputTokens: "7", "tollgate.attempt": itoa(i + 1)}
				if i < tc.attempts-1 {
					want[keyStatusCode], want[keyErrorType] = "503", "upstream_unavailable"
				}
				for k, v := range want {
					if a[k] != v {
						t.Errorf("attempt %d %s = %q, want %q", i+1, k, a[k], v)
					}
				}
				if failed := s.Status.Code == codes.Error; failed != (i < tc.attempts-1) {
					t.Errorf("attempt %d failed = %v", i+1, failed)
				}
			}
		})
	}
}

func itoa(n int) string { return attribute.IntValue(n).Emit() }

func TestSetStatus(t *testing.T) {
	tests := []struct {
		name      string
		attempt   bool
		code      int
		errType   string
		wantError string // error.type; "" for a span that did not fail
	}{
		{name: "request ok", code: 200},
		{name: "request 4xx is the client's", code: 404},
		{name: "request 4xx with error type", code: 429, errType: "budget_exceeded", wantError: "budget_exceeded"},
		{name: "request 5xx", code: 502, wantError: "502"},
		{name: "attempt 4xx", attempt: true, code: 400, wantError: "400"},
		{name: "attempt no response", attempt: true, errType: "timeout", wantError: "timeout"},
		{name: "attempt ok", attempt: true, code: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, exp := memTracer(t)
			ctx, s := tr.StartRequest(context.Background(), nil, "/v1/embeddings", "r")
			if tc.attempt {
				_, s = tr.StartAttempt(ctx, "vllm", "m", 1)
			}
			s.SetStatus(tc.code, tc.errType)
			s.End()
			got := exp.GetSpans()[0]
			a := attrs(got.Attributes)
			if a[keyErrorType] != tc.wantError {
				t.Errorf("error.type = %q, want %q", a[keyErrorType], tc.wantError)
			}
			if failed := got.Status.Code == codes.Error; failed != (tc.wantError != "") {
				t.Errorf("status error = %v, want %v", failed, tc.wantError != "")
			}
			if _, ok := a[keyStatusCode]; ok != (tc.code > 0) {
				t.Errorf("http.response.status_code present = %v", ok)
			}
		})
	}
}

func TestAttemptRenamedByOperation(t *testing.T) {
	tr, exp := memTracer(t)
	ctx, rs := tr.StartRequest(context.Background(), nil, "/v1/embeddings", "r")
	_, as := tr.StartAttempt(ctx, "openai", "text-embed", 1)
	as.SetGenAI(GenAI{Operation: "embeddings", RequestModel: "text-embed", InputTokens: 3})
	as.End()
	rs.End()
	if got := exp.GetSpans()[0].Name; got != "embeddings text-embed" {
		t.Errorf("attempt span name %q, want \"embeddings text-embed\"", got)
	}
}

func TestDisabled(t *testing.T) {
	tests := []struct {
		name string
		cfg  *Config // nil: a nil *Tracer
		env  map[string]string
	}{
		{name: "nil tracer"},
		{name: "no endpoint", cfg: &Config{}},
		{name: "sdk disabled by env", cfg: &Config{Endpoint: "http://127.0.0.1:4318"}, env: map[string]string{"OTEL_SDK_DISABLED": "true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var tr *Tracer
			if tc.cfg != nil {
				var err error
				if tr, err = Start(context.Background(), *tc.cfg, nil); err != nil {
					t.Fatal(err)
				}
				if tr == nil {
					t.Fatal("Start returned a nil Tracer")
				}
			}
			if tr.Enabled() {
				t.Fatal("Enabled() = true, want false")
			}
			var in, out fasthttp.RequestHeader
			in.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			base := context.Background()
			run := func() {
				ctx, rs := tr.StartRequest(base, &in, "/v1/chat/completions", "req-1")
				actx, as := tr.StartAttempt(ctx, "openai", "mock-gpt", 1)
				tr.Inject(actx, &out)
				as.SetGenAI(GenAI{System: "openai", InputTokens: 1})
				as.SetStatus(500, "x")
				as.End()
				rs.SetStatus(200, "")
				rs.End()
				if ctx != base || actx != base {
					t.Fatal("disabled tracer changed the context")
				}
			}
			if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
				t.Errorf("disabled request allocates %.0f times, want 0", allocs)
			}
			if v := out.Peek("traceparent"); v != nil {
				t.Errorf("disabled tracer injected traceparent %q", v)
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

// collector records the OTLP/HTTP export requests it receives.
type collector struct {
	mu    sync.Mutex
	paths []string
	reqs  []*coltracepb.ExportTraceServiceRequest
	errs  []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths = append(c.paths, r.URL.Path)
	if err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		c.errs = append(c.errs, r.Method+" "+r.Header.Get("Content-Type")+" "+errString(err))
	}
	c.reqs = append(c.reqs, req)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestOTLPExport(t *testing.T) {
	tests := []struct {
		name        string
		cfg         func(url string) Config
		env         func(url string) map[string]string
		wantPath    string
		wantService string
	}{
		{
			name:        "config endpoint",
			cfg:         func(u string) Config { return Config{Endpoint: u, ServiceName: "tollgate-test"} },
			wantPath:    "/v1/traces",
			wantService: "tollgate-test",
		},
		{
			name: "host:port endpoint, insecure",
			cfg: func(u string) Config {
				return Config{Endpoint: strings.TrimPrefix(u, "http://"), Insecure: true, SampleRatio: 1}
			},
			wantPath:    "/v1/traces",
			wantService: DefaultServiceName,
		},
		{
			name:        "endpoint with its own path",
			cfg:         func(u string) Config { return Config{Endpoint: u + "/otlp/v1/traces"} },
			wantPath:    "/otlp/v1/traces",
			wantService: DefaultServiceName,
		},
		{
			name: "endpoint from the environment",
			cfg:  func(string) Config { return Config{} },
			env: func(u string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": u, "OTEL_SERVICE_NAME": "from-env"}
			},
			wantPath:    "/v1/traces",
			wantService: "from-env",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			col := &collector{}
			srv := httptest.NewServer(col)
			t.Cleanup(srv.Close)
			if tc.env != nil {
				for k, v := range tc.env(srv.URL) {
					t.Setenv(k, v)
				}
			}
			tr, err := Start(context.Background(), tc.cfg(srv.URL), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if !tr.Enabled() {
				t.Fatal("Enabled() = false, want true")
			}
			ctx, rs := tr.StartRequest(context.Background(), nil, "/v1/chat/completions", "req-otlp")
			_, as := tr.StartAttempt(ctx, "anthropic", "mock-claude", 1)
			as.SetGenAI(GenAI{System: "anthropic", ResponseModel: "mock-claude", InputTokens: 5, OutputTokens: 9})
			as.End()
			rs.End()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(sctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}

			col.mu.Lock()
			defer col.mu.Unlock()
			if len(col.reqs) == 0 {
				t.Fatal("collector received no export")
			}
			if len(col.errs) > 0 {
				t.Fatalf("bad export requests: %q", col.errs)
			}
			for _, p := range col.paths {
				if p != tc.wantPath {
					t.Errorf("export path %q, want %q", p, tc.wantPath)
				}
			}
			names := map[string]bool{}
			service := ""
			for _, r := range col.reqs {
				for _, rsp := range r.GetResourceSpans() {
					for _, kv := range rsp.GetResource().GetAttributes() {
						if kv.GetKey() == "service.name" {
							service = kv.GetValue().GetStringValue()
						}
					}
					for _, ss := range rsp.GetScopeSpans() {
						for _, s := range ss.GetSpans() {
							names[s.GetName()] = true
						}
					}
				}
			}
			if !names["/v1/chat/completions"] || !names["chat mock-claude"] || len(names) != 2 {
				t.Errorf("exported span names %v, want the request and the attempt", names)
			}
			if service != tc.wantService {
				t.Errorf("service.name = %q, want %q", service, tc.wantService)
			}
		})
	}
}

// syncBuffer is a log sink safe for the exporter's goroutine.
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

func TestUnreachableCollector(t *testing.T) {
	clearEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	var logs syncBuffer
	begin := time.Now()
	tr, err := Start(context.Background(), Config{Endpoint: "http://" + addr}, slog.New(slog.NewTextHandler(&logs, nil)))
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start against an unreachable collector took %v", took)
	if took > time.Second {
		t.Errorf("Start took %v, want under 1s", took)
	}
	ctx, rs := tr.StartRequest(context.Background(), nil, "/v1/chat/completions", "r")
	_, as := tr.StartAttempt(ctx, "openai", "m", 1)
	as.End()
	rs.End()
	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = tr.Shutdown(sctx) // the deadline ends the exporter's retries
	if !strings.Contains(logs.String(), "trace export failing") {
		t.Errorf("no export failure logged; logs:\n%s", logs.String())
	}
}

func TestStartBadEndpoint(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string
	}{
		{name: "unknown scheme", endpoint: "ftp://127.0.0.1:4318"},
		{name: "no host", endpoint: "http://"},
		{name: "unparsable", endpoint: "http://[::1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			if tr, err := Start(context.Background(), Config{Endpoint: tc.endpoint}, nil); err == nil {
				_ = tr.Shutdown(context.Background())
				t.Fatalf("Start(%q) succeeded, want an error", tc.endpoint)
			}
		})
	}
}
