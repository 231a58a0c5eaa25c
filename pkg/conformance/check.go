package conformance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/tokenize"
)

// checker judges one case from what the client saw and its usage event.
type checker struct {
	c      *Case
	o      *observation
	routes *Routes
	est    *tokenize.Estimator
}

// problems collects what is wrong in one column.
type problems []string

func (p *problems) addf(format string, a ...any) { *p = append(*p, fmt.Sprintf(format, a...)) }

// verdict is a Pass with ok as detail, or a Fail listing the problems.
func (p problems) verdict(ok string) Check {
	if len(p) == 0 {
		return Check{Verdict: Pass, Detail: ok}
	}
	return Check{Verdict: Fail, Detail: strings.Join(p, "; ")}
}

// target returns the target that must serve the case, or nil.
func (k *checker) target() *Target {
	switch k.c.want.served {
	case servedPrimary:
		return &k.routes.Primary
	case servedBackup:
		return &k.routes.Backup
	}
	return nil
}

// attempts is the upstream calls the case takes.
func (k *checker) attempts() int {
	switch {
	case k.c.want.served == servedNone:
		return 0
	case k.c.want.fallback:
		return 2
	}
	return 1
}

// routing checks which target answered and in how many calls, as the
// response headers (and the usage event, when read) say.
func (k *checker) routing(ev *event) Check {
	if k.o.err != nil {
		return Check{Verdict: Fail, Detail: k.o.err.Error()}
	}
	h := k.o.header
	prov, model, att := h.Get("X-Tollgate-Provider"), h.Get("X-Tollgate-Model"), h.Get("X-Tollgate-Attempts")
	var p problems
	t := k.target()
	if t == nil {
		if prov != "" || model != "" || att != "" {
			p.addf("answered by %s/%s after %s attempt(s); no upstream may be called", prov, model, att)
		}
		if ev != nil && ev.Provider != "" {
			p.addf("usage event names provider %s; want none", ev.Provider)
		}
		return p.verdict("no upstream called")
	}
	want := k.attempts()
	if prov != t.Provider || model != t.Model {
		p.addf("answered by %s, want %s", orMissing(prov+"/"+model, prov == "" && model == ""), t.Deployment())
	}
	if att != strconv.Itoa(want) {
		p.addf("x-tollgate-attempts %s, want %d", orMissing(att, att == ""), want)
	}
	if ev != nil {
		if ev.Provider != t.Provider || ev.ServedModel != t.Model {
			p.addf("usage event says served by %s/%s, want %s", ev.Provider, ev.ServedModel, t.Deployment())
		}
		if int(ev.Attempts) != want {
			p.addf("usage event says %d attempt(s), want %d", ev.Attempts, want)
		}
	}
	return p.verdict(fmt.Sprintf("%s, %d attempt(s)", t.Deployment(), want))
}

// fallback checks the request moved to the fallback model exactly when the
// case says it must.
func (k *checker) fallback(ev *event) Check {
	if k.o.err != nil {
		return Check{Verdict: Fail, Detail: k.o.err.Error()}
	}
	prov := k.o.header.Get("X-Tollgate-Provider")
	att := k.o.header.Get("X-Tollgate-Attempts")
	moved := prov == k.routes.Backup.Provider
	var p problems
	if !k.c.want.fallback {
		if moved {
			p.addf("fell back to %s after %s attempt(s): this failure must not fail over", k.routes.Backup.Deployment(), att)
		}
		if ev != nil && (ev.Provider == k.routes.Backup.Provider || slices.Contains(ev.Fallbacks, k.routes.Backup.Deployment())) {
			p.addf("usage event shows a fallback (provider %s, fallbacks %v)", ev.Provider, ev.Fallbacks)
		}
		return p.verdict("none, as required")
	}
	from, to := k.routes.Primary.Deployment(), k.routes.Backup.Deployment()
	if !moved {
		p.addf("no fallback: answered by %s after %s attempt(s) with status %d; want %s to fall back to %s (model %s)",
			orMissing(prov, prov == ""), orMissing(att, att == ""), k.o.status, from, to, k.routes.FallbackModel)
	}
	if ev != nil && !slices.Equal(ev.Fallbacks, []string{from}) {
		p.addf("usage event fallbacks %v, want [%s]", ev.Fallbacks, from)
	}
	return p.verdict(fmt.Sprintf("%s -> %s", from, to))
}

// billing checks the request's usage event: status, error type, tokens and
// cost.
func (k *checker) billing(ev *event, wait time.Duration) Check {
	if ev == nil {
		return Check{Verdict: Fail, Detail: fmt.Sprintf("no usage event with request id %s within %s", k.o.requestID, wait)}
	}
	w := &k.c.want
	var p problems
	if int(ev.StatusCode) != w.evStatus || ev.ErrorType != w.evError {
		p.addf("event status %d %q, want %d %q", ev.StatusCode, ev.ErrorType, w.evStatus, w.evError)
	}
	if ev.RequestedModel != k.c.Model || ev.Stream != k.c.Stream || ev.Endpoint != "/v1/chat/completions" {
		p.addf("event says model %q stream %v endpoint %s, want %q %v /v1/chat/completions",
			ev.RequestedModel, ev.Stream, ev.Endpoint, k.c.Model, k.c.Stream)
	}
	var in, out uint64
	how := ""
	switch w.bill {
	case billReported:
		in, out, how = k.c.mockPromptTokens(), uint64(w.chunks), "reported"
		if ev.Estimated {
			p.addf("event marked estimated, but the provider reported usage")
		}
	case billEstimated:
		in, out = uint64(k.est.ChatPrompt(k.o.body)), uint64(k.est.Count([]byte(k.o.delivered())))
		how = "estimated"
		if !ev.Estimated {
			p.addf("event not marked estimated, but the provider's usage was missing or malformed")
		}
	case billZero:
		how = "nothing served"
		if ev.Estimated {
			p.addf("event marked estimated for a request nobody answered")
		}
	}
	if ev.PromptTokens != in || ev.CompletionTokens != out {
		p.addf("tokens %d in + %d out, want %d + %d (%s)", ev.PromptTokens, ev.CompletionTokens, in, out, how)
	}
	var cost int64
	if t := k.target(); t != nil && w.bill != billZero {
		cost = t.Price.Cost(pricing.Usage{PromptTokens: in, CompletionTokens: out})
		if ev.CostNanoUsd != cost {
			p.addf("cost %d nano-USD, want %d (%s at %s in, %s out per million tokens)", ev.CostNanoUsd, cost,
				t.Model, pricing.FormatUSD(t.Price.InputPerM), pricing.FormatUSD(t.Price.OutputPerM))
		}
		if cost <= 0 {
			p.addf("expected cost is %d: the kit's price for %s is zero", cost, t.Model)
		}
	} else if ev.CostNanoUsd != 0 {
		p.addf("cost %d nano-USD, want 0", ev.CostNanoUsd)
	}
	return p.verdict(fmt.Sprintf("status %d, %d+%d tokens (%s), %d nano-USD", w.evStatus, in, out, how, cost))
}

// client checks what the caller got: status, headers, body or stream.
func (k *checker) client() Check {
	o, w := k.o, &k.c.want
	if o.err != nil {
		return Check{Verdict: Fail, Detail: o.err.Error()}
	}
	var p problems
	if got := o.header.Get("X-Request-Id"); got == "" || got == o.clientID {
		p.addf("x-request-id %q, want the gateway's own id", got)
	}
	if got := o.header.Get("X-Client-Request-Id"); got != o.clientID {
		p.addf("x-client-request-id %q, want the client's %q", got, o.clientID)
	}
	if o.status != w.status {
		p.addf("status %d, want %d%s", o.status, w.status, errorNote(o))
		return p.verdict("")
	}
	var ok string
	switch {
	case w.status != 200:
		ok = k.errorAnswer(&p)
	case k.c.Stream:
		ok = k.streamAnswer(&p)
	default:
		ok = k.plainAnswer(&p)
	}
	return p.verdict(ok)
}

// errorAnswer checks an error answer: the OpenAI shape, code and reason,
// and that a 4xx does not invite a retry.
func (k *checker) errorAnswer(p *problems) string {
	o, w := k.o, &k.c.want
	if o.stream {
		p.addf("a refused request got an event stream instead of a plain HTTP error")
		return ""
	}
	if !strings.HasPrefix(o.header.Get("Content-Type"), "application/json") {
		p.addf("content-type %q, want application/json", o.header.Get("Content-Type"))
	}
	code, msg, bad := errorFields(o.raw)
	switch {
	case bad != "":
		p.addf("error body: %s", bad)
	case code != w.errCode:
		p.addf("error code %q, want %q (%s)", code, w.errCode, msg)
	case !strings.Contains(msg, w.errText):
		p.addf("error message %q lacks the provider's reason %q", msg, w.errText)
	}
	if o.status >= 400 && o.status < 500 && o.status != 429 && o.header.Get("X-Should-Retry") != "false" {
		p.addf("x-should-retry %q, want false on a %d", o.header.Get("X-Should-Retry"), o.status)
	}
	return fmt.Sprintf("%d %s", o.status, w.errCode)
}

// plainAnswer checks a non-stream answer.
func (k *checker) plainAnswer(p *problems) string {
	o, w := k.o, &k.c.want
	var c completion
	if err := json.Unmarshal(o.raw, &c); err != nil {
		p.addf("answer is not JSON: %v", err)
		return ""
	}
	if c.Object != "chat.completion" || c.ID == "" || c.Created <= 0 || len(c.Choices) != 1 {
		p.addf("answer is not a chat.completion with one choice (object %q, id %q, created %d, %d choices)",
			c.Object, c.ID, c.Created, len(c.Choices))
		return ""
	}
	if n := len(strings.Fields(c.Choices[0].Message.Content)); n != w.chunks || c.Choices[0].FinishReason != "stop" {
		p.addf("answer has %d words and finish_reason %q, want %d and stop", n, c.Choices[0].FinishReason, w.chunks)
	}
	return fmt.Sprintf("200, %d words", w.chunks)
}

// streamAnswer checks an event stream: content, one id, how it ends.
func (k *checker) streamAnswer(p *problems) string {
	o, w := k.o, &k.c.want
	if !o.stream {
		p.addf("content-type %q, want text/event-stream", o.header.Get("Content-Type"))
		return ""
	}
	if o.readErr != nil {
		p.addf("stream not terminated cleanly: %v", o.readErr)
	}
	var ids []string
	var content, finishes, dones, errs int
	var first, last time.Time
	for i, ev := range o.events {
		switch {
		case ev.raw:
			p.addf("non-SSE bytes reached the client: %q", truncate(ev.data, 60))
			continue
		case ev.data == "[DONE]":
			dones++
			if i != len(o.events)-1 {
				p.addf("[DONE] is not the last event")
			}
			continue
		case strings.HasPrefix(ev.data, `{"error"`):
			errs++
			if i != len(o.events)-1 {
				p.addf("the error event is not the last event")
			}
			k.errorEvent(p, ev.data)
			continue
		}
		var c chunkEvent
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			p.addf("event %d is not JSON: %q", i, truncate(ev.data, 60))
			continue
		}
		if !slices.Contains(ids, c.ID) {
			ids = append(ids, c.ID)
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finishes++
			}
			if ch.Delta.Content != "" {
				if content == 0 {
					first = ev.at
				}
				content++
				last = ev.at
			}
		}
	}
	if content != w.chunks {
		p.addf("%d content chunks, want %d", content, w.chunks)
	}
	if len(ids) > 1 {
		p.addf("%d different chunk ids, want one", len(ids))
	}
	end := "[DONE]"
	switch w.end {
	case endDone:
		if dones != 1 || errs != 0 || finishes != 1 {
			p.addf("stream ended with %d [DONE], %d error events, %d finish_reasons; want exactly one [DONE] and one finish_reason", dones, errs, finishes)
		}
	case endError:
		end = w.eventErr + " event"
		if errs != 1 || dones != 0 || finishes != 0 {
			p.addf("stream ended with %d error events, %d [DONE], %d finish_reasons; want one %s error event, no [DONE]", errs, dones, finishes, w.eventErr)
		}
	}
	if w.paced > 0 && last.Sub(first) < w.paced {
		p.addf("content chunks arrived within %s of each other, want them spread over at least %s (buffered?)",
			last.Sub(first).Round(time.Millisecond), w.paced)
	}
	return fmt.Sprintf("200, %d chunks, then %s", w.chunks, end)
}

// errorEvent checks a stream's error event: the OpenAI error shape, the
// code and the provider's reason.
func (k *checker) errorEvent(p *problems, data string) {
	w := &k.c.want
	code, msg, bad := errorFields([]byte(data))
	switch {
	case bad != "":
		p.addf("error event: %s", bad)
	case code != w.eventErr:
		p.addf("error event code %q, want %q (%s)", code, w.eventErr, msg)
	case !strings.Contains(msg, w.errText):
		p.addf("error event message %q lacks the provider's reason %q", msg, w.errText)
	}
}

// errorFields reads an OpenAI error body; bad says what is wrong with its
// shape (every key present, message and type strings).
func errorFields(body []byte) (code, msg, bad string) {
	var e struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		return "", "", fmt.Sprintf("not an OpenAI error object: %q", truncate(string(body), 120))
	}
	for _, key := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[key]; !ok {
			return "", "", fmt.Sprintf("lacks the %q key: %s", key, truncate(string(body), 120))
		}
	}
	var typ string
	if json.Unmarshal(e.Error["message"], &msg) != nil || json.Unmarshal(e.Error["type"], &typ) != nil || msg == "" || typ == "" {
		return "", "", fmt.Sprintf("message and type must be non-empty strings: %s", truncate(string(body), 120))
	}
	_ = json.Unmarshal(e.Error["code"], &code) // null leaves it empty
	return code, msg, ""
}

// errorNote quotes an error answer's message, to explain a wrong status.
func errorNote(o *observation) string {
	if o.stream {
		return " (an event stream)"
	}
	if code, msg, bad := errorFields(o.raw); bad == "" {
		return fmt.Sprintf(" (%s: %s)", code, msg)
	}
	return ""
}

func orMissing(s string, missing bool) string {
	if missing {
		return "(none)"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
