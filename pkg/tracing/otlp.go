package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otelscope "go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The exporter speaks OTLP/HTTP with binary protobuf bodies (OTLP
// specification 1.x, opentelemetry-proto trace/v1), encoded field by field
// with protowire. The OpenTelemetry OTLP exporter module would do the same,
// but it links gRPC and the collector's generated services, whose package
// initialisation and code alone add about 12 MB to the gateway's idle
// resident memory; this file is the part of it a gateway needs.

// Field numbers of the OTLP messages written here.
const (
	fExportResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1
	fResourceDropped    = 2

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID       = 1
	fSpanSpanID        = 2
	fSpanTraceState    = 3
	fSpanParentSpanID  = 4
	fSpanName          = 5
	fSpanKind          = 6
	fSpanStart         = 7
	fSpanEnd           = 8
	fSpanAttributes    = 9
	fSpanDroppedAttrs  = 10
	fSpanEvents        = 11
	fSpanDroppedEvents = 12
	fSpanLinks         = 13
	fSpanDroppedLinks  = 14
	fSpanStatus        = 15
	fSpanFlags         = 16

	fEventTime       = 1
	fEventName       = 2
	fEventAttributes = 3
	fEventDropped    = 4

	fLinkTraceID    = 1
	fLinkSpanID     = 2
	fLinkTraceState = 3
	fLinkAttributes = 4
	fLinkDropped    = 5
	fLinkFlags      = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKVList = 6
	fAnyBytes  = 7

	fListValues = 1 // ArrayValue.values and KeyValueList.values

	fPartialSuccess  = 1 // ExportTraceServiceResponse.partial_success
	fRejectedSpans   = 1
	fPartialErrorMsg = 2
)

// OTLP enum values that differ from the SDK's.
const (
	statusOK    = 1
	statusError = 2

	flagHasIsRemote = 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagIsRemote    = 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)

// encodeSpans returns the ExportTraceServiceRequest of spans: one
// ResourceSpans per distinct resource and, within it, one ScopeSpans per
// instrumentation scope, both in the order the spans first name them.
func encodeSpans(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeGroup struct {
		scope otelscope.Scope
		spans []sdktrace.ReadOnlySpan
	}
	type resourceGroup struct {
		res    *resource.Resource
		scopes []*scopeGroup
	}
	var groups []*resourceGroup
	byRes := map[attribute.Distinct]*resourceGroup{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		key := s.Resource().Equivalent()
		g := byRes[key]
		if g == nil {
			g = &resourceGroup{res: s.Resource()}
			byRes[key] = g
			groups = append(groups, g)
		}
		sc := s.InstrumentationScope()
		i := slices.IndexFunc(g.scopes, func(x *scopeGroup) bool { return x.scope == sc })
		if i < 0 {
			i = len(g.scopes)
			g.scopes = append(g.scopes, &scopeGroup{scope: sc})
		}
		g.scopes[i].spans = append(g.scopes[i].spans, s)
	}
	var b []byte
	for _, g := range groups {
		b = appendMessage(b, fExportResourceSpans, func(b []byte) []byte {
			res := g.res
			b = appendMessage(b, fResourceSpansResource, func(b []byte) []byte {
				return appendKeyValues(b, fResourceAttributes, res.Attributes())
			})
			for _, sg := range g.scopes {
				b = appendMessage(b, fResourceSpansScopeSpans, func(b []byte) []byte {
					if sg.scope != (otelscope.Scope{}) {
						b = appendMessage(b, fScopeSpansScope, func(b []byte) []byte {
							b = appendString(b, fScopeName, sg.scope.Name)
							b = appendString(b, fScopeVersion, sg.scope.Version)
							return appendKeyValues(b, fScopeAttributes, sg.scope.Attributes.ToSlice())
						})
					}
					for _, s := range sg.spans {
						b = appendMessage(b, fScopeSpansSpans, func(b []byte) []byte { return appendSpan(b, s) })
					}
					return appendString(b, fScopeSpansSchemaURL, sg.scope.SchemaURL)
				})
			}
			return appendString(b, fResourceSpansSchemaURL, res.SchemaURL())
		})
	}
	return b
}

// appendSpan writes the fields of one Span.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	b = appendString(b, fSpanTraceState, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, fSpanParentSpanID, psid[:])
	}
	b = appendString(b, fSpanName, s.Name())
	if k := s.SpanKind(); k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		// The SDK's kinds have the OTLP enum's numbers (INTERNAL 1 ... CONSUMER 5).
		b = appendVarint(b, fSpanKind, uint64(k))
	}
	b = appendFixed64(b, fSpanStart, unixNano(s.StartTime()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.EndTime()))
	b = appendKeyValues(b, fSpanAttributes, s.Attributes())
	b = appendVarint(b, fSpanDroppedAttrs, clampCount(s.DroppedAttributes()))
	for _, e := range s.Events() {
		b = appendMessage(b, fSpanEvents, func(b []byte) []byte {
			b = appendFixed64(b, fEventTime, unixNano(e.Time))
			b = appendString(b, fEventName, e.Name)
			b = appendKeyValues(b, fEventAttributes, e.Attributes)
			return appendVarint(b, fEventDropped, clampCount(e.DroppedAttributeCount))
		})
	}
	b = appendVarint(b, fSpanDroppedEvents, clampCount(s.DroppedEvents()))
	for _, l := range s.Links() {
		b = appendMessage(b, fSpanLinks, func(b []byte) []byte {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, fLinkTraceID, ltid[:])
			b = appendBytes(b, fLinkSpanID, lsid[:])
			b = appendString(b, fLinkTraceState, l.SpanContext.TraceState().String())
			b = appendKeyValues(b, fLinkAttributes, l.Attributes)
			b = appendVarint(b, fLinkDropped, clampCount(l.DroppedAttributeCount))
			return appendFixed32(b, fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()))
		})
	}
	b = appendVarint(b, fSpanDroppedLinks, clampCount(s.DroppedLinks()))
	st := s.Status()
	b = appendMessage(b, fSpanStatus, func(b []byte) []byte {
		b = appendString(b, fStatusMessage, st.Description)
		switch st.Code {
		case codes.Ok:
			b = appendVarint(b, fStatusCode, statusOK)
		case codes.Error:
			b = appendVarint(b, fStatusCode, statusError)
		}
		return b
	})
	return appendFixed32(b, fSpanFlags, spanFlags(sc.TraceFlags(), parent.IsRemote()))
}

// spanFlags is the W3C trace flags in the low byte, with whether the parent
// (or a link's context) is remote.
func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

// appendKeyValues writes each attribute as a KeyValue in field num.
func appendKeyValues(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMessage(b, num, func(b []byte) []byte {
			b = appendString(b, fKeyValueKey, string(kv.Key))
			return appendMessage(b, fKeyValueValue, func(b []byte) []byte { return appendAnyValue(b, kv.Value) })
		})
	}
	return b
}

// appendAnyValue writes the fields of the AnyValue of v. A set member of
// the oneof is written even when it holds its zero value, so that the
// receiver sees which one is set; an empty value sets none.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		return protowire.AppendVarint(protowire.AppendTag(b, fAnyBool, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, fAnyInt, protowire.VarintType), uint64(v.AsInt64())) //nolint:gosec // int64 is sent as two's complement
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		return protowire.AppendString(protowire.AppendTag(b, fAnyString, protowire.BytesType), v.AsString())
	case attribute.BYTESLICE:
		return protowire.AppendBytes(protowire.AppendTag(b, fAnyBytes, protowire.BytesType), v.AsByteSlice())
	case attribute.BOOLSLICE:
		return appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		return appendArray(b, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		return appendMessage(b, fAnyKVList, func(b []byte) []byte { return appendKeyValues(b, fListValues, v.AsMap()) })
	case attribute.EMPTY:
		return b
	default:
		return protowire.AppendString(protowire.AppendTag(b, fAnyString, protowire.BytesType), "INVALID")
	}
}

// appendArray writes an ArrayValue of xs, each made a Value by val.
func appendArray[T any](b []byte, xs []T, val func(T) attribute.Value) []byte {
	return appendMessage(b, fAnyArray, func(b []byte) []byte {
		for _, x := range xs {
			b = appendMessage(b, fListValues, func(b []byte) []byte { return appendAnyValue(b, val(x)) })
		}
		return b
	})
}

// appendMessage writes field num holding the message f appends: f writes
// after the tag, and the length is then put in front of what it wrote.
func appendMessage(b []byte, num protowire.Number, f func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = f(b)
	var l [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(l[:], uint64(len(b)-at))
	return slices.Insert(b, at, l[:n]...)
}

// The scalar writers leave out a zero value, as proto3 encoding does.

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) } //nolint:gosec // not negative

func clampCount(n int) uint64 { return uint64(min(max(n, 0), math.MaxUint32)) } //nolint:gosec // clamped

// otlpExporter posts batches of spans to an OTLP/HTTP collector.
type otlpExporter struct {
	url     string
	headers map[string]string
	gzip    bool
	timeout time.Duration // per batch, retries included
	client  *http.Client
}

// Retry waits of a batch the collector asks to resend (429, 502, 503 or
// 504), as the OTLP specification allows: doubling from retryFirst to
// retryMax, or the collector's Retry-After, until the batch's timeout. A
// connection that fails is not retried: the batch is dropped and logged.
const (
	retryFirst = 500 * time.Millisecond
	retryMax   = 5 * time.Second
)

// ExportSpans sends spans in one request, retrying as above; the error is
// the last attempt's.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body := encodeSpans(spans)
	if e.gzip {
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		_, _ = zw.Write(body) // a bytes.Buffer does not fail
		_ = zw.Close()
		body = zb.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	wait := retryFirst
	for {
		retryAfter, err := e.post(ctx, body)
		if err == nil || retryAfter < 0 {
			return err
		}
		if retryAfter == 0 {
			retryAfter = wait
			wait = min(2*wait, retryMax)
		}
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// post sends one request. retry is -1 when the error is final, otherwise
// the wait the collector asked for (0: none given).
func (e *otlpExporter) post(ctx context.Context, body []byte) (retry time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return -1, err
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return -1, err // no collector there: the batch is dropped, not held
	}
	defer resp.Body.Close()
	out, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode/100 == 2:
		if rerr != nil {
			return -1, nil // accepted; the partial-success detail is lost
		}
		return -1, partialSuccess(out)
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		after := time.Duration(0)
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return after, fmt.Errorf("collector answered %s", resp.Status)
	default:
		return -1, fmt.Errorf("collector answered %s: %.200s", resp.Status, out)
	}
}

// partialSuccess reads an ExportTraceServiceResponse and reports the spans
// the collector rejected, if any.
func partialSuccess(b []byte) error {
	var rejected int64
	var msg string
	err := eachField(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num != fPartialSuccess || v == nil {
			return nil
		}
		return eachField(v, func(num protowire.Number, v []byte, n uint64) error {
			switch {
			case num == fRejectedSpans && v == nil:
				rejected = int64(n) //nolint:gosec // a count sent as int64
			case num == fPartialErrorMsg && v != nil:
				msg = string(v)
			}
			return nil
		})
	})
	switch {
	case err != nil:
		return fmt.Errorf("collector's answer: %w", err)
	case rejected > 0 || msg != "":
		return fmt.Errorf("collector rejected %d spans: %s", rejected, msg)
	}
	return nil
}

// eachField calls f with each field of the message b: v is a
// length-delimited field's bytes (nil for others), n a varint's value.
func eachField(b []byte, f func(num protowire.Number, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
			if v == nil && n >= 0 {
				v = []byte{}
			}
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v, x); err != nil {
			return err
		}
	}
	return nil
}

// Shutdown closes the exporter's idle connections.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// newExporter builds the exporter of cfg and the OTEL_EXPORTER_OTLP_*
// variables (the OTLP exporter specification): the endpoint from cfg, else
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended; and, each from the
// traces variable or else the general one, HEADERS, TIMEOUT (ms, default
// 10 s), COMPRESSION (gzip or none), CERTIFICATE, CLIENT_CERTIFICATE and
// CLIENT_KEY.
func newExporter(cfg Config) (*otlpExporter, error) {
	endpoint, err := exportURL(cfg)
	if err != nil {
		return nil, err
	}
	e := &otlpExporter{url: endpoint, timeout: 10 * time.Second}
	if h := otelEnv("HEADERS"); h != "" {
		if e.headers, err = parseHeaders(h); err != nil {
			return nil, err
		}
	}
	if t := otelEnv("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT %q: want milliseconds", t)
		}
		e.timeout = time.Duration(ms) * time.Millisecond
	}
	switch c := otelEnv("COMPRESSION"); c {
	case "", "none":
	case "gzip":
		e.gzip = true
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION %q: want gzip or none", c)
	}
	tlsCfg, err := exportTLS()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone() //nolint:forcetypeassert // the standard library's
	tr.TLSClientConfig = tlsCfg
	e.client = &http.Client{Transport: tr}
	return e, nil
}

// exportURL is where batches go (see newExporter).
func exportURL(cfg Config) (string, error) {
	raw, base, what := cfg.Endpoint, false, "tracing endpoint"
	if raw == "" {
		if raw = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); raw != "" {
			what = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		} else {
			raw, base, what = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), true, "OTEL_EXPORTER_OTLP_ENDPOINT"
		}
	}
	s := raw
	if cfg.Endpoint != "" && !strings.Contains(s, "://") {
		scheme := "https"
		if cfg.Insecure {
			scheme = "http"
		}
		s = scheme + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("parse %s %q: %w", what, raw, err)
	}
	if u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("parse %s %q: want http(s)://host:port", what, raw)
	}
	switch {
	case base:
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	case u.Path == "" || u.Path == "/":
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// otelEnv reads OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>.
func otelEnv(name string) string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_" + name)
}

// parseHeaders reads "key1=value1,key2=value2" with URL-encoded values.
func parseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %q is not key=value", pair)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %q: %w", pair, err)
		}
		h[k] = dv
	}
	return h, nil
}

// exportTLS is the client TLS of the CERTIFICATE (trusted CAs, PEM) and
// CLIENT_CERTIFICATE/CLIENT_KEY variables; nil when none is set.
func exportTLS() (*tls.Config, error) {
	ca, cert, key := otelEnv("CERTIFICATE"), otelEnv("CLIENT_CERTIFICATE"), otelEnv("CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE %s: no PEM certificate", ca)
		}
	}
	if cert != "" || key != "" {
		if cert == "" || key == "" {
			return nil, errors.New("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together")
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("OTLP client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
