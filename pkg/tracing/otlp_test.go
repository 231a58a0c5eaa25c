package tracing

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelscope "go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// bodies records the raw bodies posted to it and answers with status
// (200 when 0), once each from the front of a queue when one is set.
type bodies struct {
	mu      sync.Mutex
	got     [][]byte
	headers []http.Header
	answers []int
	reply   []byte
}

func (b *bodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rd io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rd = zr
	}
	body, _ := io.ReadAll(rd)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, body)
	b.headers = append(b.headers, r.Header.Clone())
	status := http.StatusOK
	if len(b.answers) > 0 {
		status, b.answers = b.answers[0], b.answers[1:]
	}
	if status != http.StatusOK {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b.reply)
}

// sampleSpans covers every field the exporter writes: two resources, two
// scopes in one, every attribute type, events, a remote link, statuses,
// trace state, remote and local parents and dropped counts.
func sampleSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ts, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	sc := func(sid byte, remote bool) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{sid, 1, 2, 3, 4, 5, 6, 7},
			TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: remote})
	}
	resA := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "gw-a"), attribute.Int("replica", 3))
	resB := resource.NewSchemaless(attribute.String("service.name", "gw-b"))
	scope1 := otelscope.Scope{Name: "tollgate", Version: "1.2.3", SchemaURL: "https://example.com/s",
		Attributes: attribute.NewSet(attribute.Bool("scoped", true))}
	scope2 := otelscope.Scope{Name: "other"}
	start := time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.UTC)
	every := []attribute.KeyValue{
		attribute.String("s", "text"), attribute.String("empty", ""), attribute.Bool("b", false), attribute.Bool("t", true),
		attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Float64("f", 2.5), attribute.Float64("fz", 0),
		attribute.StringSlice("ss", []string{"a", "", "c"}), attribute.BoolSlice("bs", []bool{true, false}),
		attribute.Int64Slice("is", []int64{1, -2, 0}), attribute.Float64Slice("fs", []float64{0.5, -1}),
	}
	stubs := tracetest.SpanStubs{
		{
			Name: "/v1/chat/completions", SpanContext: sc(1, false), Parent: sc(9, true), SpanKind: trace.SpanKindServer,
			StartTime: start, EndTime: start.Add(3 * time.Millisecond), Attributes: every,
			Events: []sdktrace.Event{{Name: "retry", Time: start.Add(time.Millisecond),
				Attributes: []attribute.KeyValue{attribute.Int("attempt", 2)}, DroppedAttributeCount: 1}},
			Links: []sdktrace.Link{{SpanContext: sc(7, true), Attributes: []attribute.KeyValue{attribute.String("why", "hedge")},
				DroppedAttributeCount: 2}},
			Status:            sdktrace.Status{Code: codes.Error, Description: "upstream 500"},
			DroppedAttributes: 4, DroppedEvents: 5, DroppedLinks: 6,
			Resource: resA, InstrumentationScope: scope1,
		},
		{
			Name: "chat mock-gpt", SpanContext: sc(2, false), Parent: sc(1, false), SpanKind: trace.SpanKindClient,
			StartTime: start, EndTime: start.Add(time.Millisecond), Status: sdktrace.Status{Code: codes.Ok},
			Resource: resA, InstrumentationScope: scope1,
		},
		{
			Name: "internal", SpanContext: sc(3, false), SpanKind: trace.SpanKindInternal,
			StartTime: start, EndTime: start, Resource: resA, InstrumentationScope: scope2,
		},
		{
			Name: "unset kind", SpanContext: sc(4, false), StartTime: start, EndTime: start.Add(time.Second),
			Resource: resB,
		},
	}
	return stubs.Snapshots()
}

// decodeSorted reads an ExportTraceServiceRequest and orders its groups, whose
// order the official exporter leaves to a map.
func decodeSorted(t *testing.T, body []byte) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Fatalf("collector cannot read the export: %v", err)
	}
	rs := req.GetResourceSpans()
	slices.SortFunc(rs, func(a, b *tracepb.ResourceSpans) int {
		return strings.Compare(prototext.Format(a.GetResource()), prototext.Format(b.GetResource()))
	})
	for _, r := range rs {
		slices.SortFunc(r.GetScopeSpans(), func(a, b *tracepb.ScopeSpans) int {
			return strings.Compare(a.GetScope().GetName(), b.GetScope().GetName())
		})
	}
	return &req
}

// The request our exporter sends is, message for message, the one the
// OpenTelemetry OTLP/HTTP exporter sends for the same spans (but for a
// link's trace state, which only ours sends).
func TestExportMatchesOfficialExporter(t *testing.T) {
	clearEnv(t)
	col := &bodies{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	spans := sampleSpans(t)
	ctx := context.Background()

	official, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := official.ExportSpans(ctx, spans); err != nil {
		t.Fatalf("official exporter: %v", err)
	}
	_ = official.Shutdown(ctx)
	ours, err := newExporter(Config{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := ours.ExportSpans(ctx, spans); err != nil {
		t.Fatalf("our exporter: %v", err)
	}
	if len(col.got) != 2 {
		t.Fatalf("collector got %d requests, want 2", len(col.got))
	}
	want, got := decodeSorted(t, col.got[0]), decodeSorted(t, col.got[1])
	// One difference, on purpose: a link carries its context's trace state
	// (Span.Link.trace_state), which the official exporter leaves out.
	links := 0
	for _, rs := range got.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				for _, l := range s.GetLinks() {
					links++
					if l.GetTraceState() != "vendor=abc,other=1" {
						t.Errorf("link trace state %q", l.GetTraceState())
					}
					l.TraceState = ""
				}
			}
		}
	}
	if links != 1 {
		t.Errorf("%d links exported, want 1", links)
	}
	if !proto.Equal(want, got) {
		t.Errorf("export differs from the official exporter's\nofficial:\n%s\nours:\n%s", prototext.Format(want), prototext.Format(got))
	}
	if n := len(got.GetResourceSpans()); n != 2 {
		t.Errorf("%d resource groups, want 2", n)
	}
	if h := col.headers[1].Get("Content-Type"); h != "application/x-protobuf" {
		t.Errorf("Content-Type %q", h)
	}
}

func TestExportEnvironment(t *testing.T) {
	clearEnv(t)
	col := &bodies{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL+"/base/")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20abc, X-Team=infra")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
	e, err := newExporter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if e.url != srv.URL+"/base/v1/traces" {
		t.Errorf("url %q, want the base with /v1/traces", e.url)
	}
	if err := e.ExportSpans(context.Background(), sampleSpans(t)[:1]); err != nil {
		t.Fatal(err)
	}
	h := col.headers[0]
	if h.Get("Authorization") != "Bearer abc" || h.Get("X-Team") != "infra" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("headers %v", h)
	}
	if req := decodeSorted(t, col.got[0]); len(req.GetResourceSpans()) != 1 {
		t.Errorf("gzip body not read back: %v", req)
	}

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/exact")
	if e, err = newExporter(Config{}); err != nil || e.url != srv.URL+"/exact" {
		t.Errorf("traces endpoint: %v %q, want it as it is", err, e.url)
	}
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":     "novalue",
		"OTEL_EXPORTER_OTLP_TIMEOUT":     "ten",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
		"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem",
		"OTEL_EXPORTER_OTLP_CLIENT_KEY":  "/nonexistent/key.pem",
	} {
		t.Run(k, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "")
			t.Setenv(k, v)
			if _, err := newExporter(Config{}); err == nil {
				t.Errorf("%s=%q accepted", k, v)
			}
		})
	}
}

func TestExportRetriesWhatTheCollectorAsks(t *testing.T) {
	clearEnv(t)
	col := &bodies{answers: []int{http.StatusServiceUnavailable}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	e, err := newExporter(Config{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), sampleSpans(t)[:1]); err != nil {
		t.Fatalf("after one 503: %v", err)
	}
	if len(col.got) != 2 || !slices.Equal(col.got[0], col.got[1]) {
		t.Errorf("%d requests, want the batch sent twice", len(col.got))
	}

	col.answers = []int{http.StatusBadRequest}
	if err := e.ExportSpans(context.Background(), sampleSpans(t)[:1]); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("a 400 gave %v, want the error and no retry", err)
	}
	if len(col.got) != 3 {
		t.Errorf("%d requests after the 400, want 3", len(col.got))
	}

	col.answers = []int{http.StatusTooManyRequests, http.StatusTooManyRequests}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.ExportSpans(ctx, sampleSpans(t)[:1]); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("retrying past the deadline gave %v", err)
	}
}

func TestExportReportsRejectedSpans(t *testing.T) {
	clearEnv(t)
	reply, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{
		PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "too old"}})
	if err != nil {
		t.Fatal(err)
	}
	col := &bodies{reply: reply}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	e, err := newExporter(Config{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = e.ExportSpans(context.Background(), sampleSpans(t))
	if err == nil || !strings.Contains(err.Error(), "rejected 3 spans: too old") {
		t.Errorf("partial success gave %v", err)
	}
	col.reply = []byte{0xff}
	if err := e.ExportSpans(context.Background(), sampleSpans(t)); err == nil {
		t.Error("an unreadable answer was taken as success")
	}
}
