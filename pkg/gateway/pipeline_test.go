package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// pipelineEndpoints are one request of each endpoint adapter: the chat
// family, the Responses API, /v1/messages (translated to the mock) and a
// pass-through endpoint.
var pipelineEndpoints = []struct {
	name, path, body string
	// label is the endpoint in spans and usage events; passThrough: a
	// pass-through endpoint (degradation model steps do not apply).
	label       string
	passThrough bool
}{
	{name: "chat", path: "/v1/chat/completions", label: "/v1/chat/completions",
		body: `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`},
	{name: "responses", path: "/v1/responses", label: "/v1/responses",
		body: `{"model":"mock-gpt","max_output_tokens":8,"input":"spend"}`},
	{name: "messages", path: "/v1/messages", label: "/v1/messages",
		body: `{"model":"mock-gpt","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`},
	{name: "pass-through", path: "/v1/moderations", label: "/v1/moderations", passThrough: true,
		body: `{"model":"omni-moderation-latest","input":"spend"}`},
}

// TestPipelineStagesOnEveryEndpoint fails when an endpoint skips a stage
// the pipeline promises to all (issue #12): the degradation ladder (a
// refusal step on every endpoint, a model step on every model endpoint),
// the trace spans, and the one usage event per request.
func TestPipelineStagesOnEveryEndpoint(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	tr := tracing.NewWithProvider(tp)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	a := newAcctRig(t, func(c *config.Config) {
		passConfig(c)
		c.Models = append(c.Models, config.Model{Name: "mock-cheap", Type: "chat", Targets: []config.Target{{Provider: "mock", Model: "mock-gpt-mini"}}})
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "0.0001", Period: "day", Degrade: []config.DegradeStep{
			{At: 0.3, Priorities: []string{"batch"}, Model: "mock-cheap"},
			{At: 0.6, Priorities: []string{"batch"}, Refuse: true},
		}}}
	})
	a.gw.tracer = tr
	tok := a.token(nil)
	used := func() float64 {
		return float64(a.tracker.Used(budget.ScopeDept, "research", budget.PeriodDay)) / 100_000
	}
	send := func(path, body, prio string) (*http.Response, []byte) {
		resp := a.post(path, tok, body, "X-Tollgate-Priority", prio)
		return resp, readBody(t, resp)
	}
	spend := func(to float64) {
		for used() < to {
			if resp, b := send("/v1/chat/completions", pipelineEndpoints[0].body, ""); resp.StatusCode != 200 {
				t.Fatalf("interactive at %.0f%%: %d %s", 100*used(), resp.StatusCode, b)
			}
		}
	}
	before := len(a.allEvents(t))
	spend(0.3)
	for _, ep := range pipelineEndpoints {
		t.Run("model step/"+ep.name, func(t *testing.T) {
			exp.Reset()
			resp, b := send(ep.path, ep.body, "batch")
			if resp.StatusCode != 200 {
				t.Fatalf("batch at %.0f%%: %d %s", 100*used(), resp.StatusCode, b)
			}
			degraded, model := resp.Header.Get("X-Tollgate-Degraded"), resp.Header.Get("X-Tollgate-Model")
			switch {
			case ep.passThrough && (degraded != "" || model != "omni-moderation-latest"):
				t.Errorf("pass-through took a model step: degraded %q model %q", degraded, model)
			case !ep.passThrough && (degraded == "" || model != "mock-gpt-mini"):
				t.Errorf("model step not taken: degraded %q model %q", degraded, model)
			}
			checkSpans(t, exp.GetSpans(), ep.label, !ep.passThrough)
		})
	}
	spend(0.6)
	for _, ep := range pipelineEndpoints {
		t.Run("refusal step/"+ep.name, func(t *testing.T) {
			resp, b := send(ep.path, ep.body, "batch")
			if resp.StatusCode != 429 || !strings.Contains(string(b), "budget degradation step") {
				t.Fatalf("batch at %.0f%%: %d %s", 100*used(), resp.StatusCode, b)
			}
			if resp, b := send(ep.path, ep.body, "interactive"); resp.StatusCode != 200 {
				t.Errorf("interactive must still pass: %d %s", resp.StatusCode, b)
			}
		})
	}
	// One usage event per request, with its endpoint and the step taken.
	events := a.allEvents(t)[before:]
	steps := map[string]int{}
	for _, ev := range events {
		if ev.DegradationStep != "" {
			steps[ev.Endpoint]++
		}
	}
	for _, ep := range pipelineEndpoints {
		want := 2 // served by the cheaper model, then refused
		if ep.passThrough {
			want = 1 // refused only
		}
		if steps[ep.label] != want {
			t.Errorf("%s: %d events record a degradation step, want %d (all: %v)", ep.label, steps[ep.label], want, steps)
		}
	}
}

// checkSpans checks one request's spans: a server span named after the
// endpoint and, when it calls a model, a client span of the upstream call
// in the same trace.
func checkSpans(t *testing.T, spans tracetest.SpanStubs, label string, attempt bool) {
	t.Helper()
	var server, client *tracetest.SpanStub
	for i := range spans {
		switch s := &spans[i]; s.SpanKind {
		case trace.SpanKindServer:
			server = s
		case trace.SpanKindClient:
			client = s
		}
	}
	if server == nil || server.Name != label {
		t.Fatalf("no server span named %s: %v", label, spans)
	}
	if attempt && (client == nil || client.Parent.SpanID() != server.SpanContext.SpanID()) {
		t.Errorf("no upstream attempt span under the request span: %v", spans)
	}
}
