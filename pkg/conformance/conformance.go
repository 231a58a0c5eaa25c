// Package conformance is Tollgate's conformance kit: it drives a running
// gateway whose routes point at mockllm (the routes of deploy/verify)
// through a matrix of upstream faults and checks, per case, four things:
//
//   - routing: which target answered (x-tollgate-provider, x-tollgate-model)
//     and how many calls it took (x-tollgate-attempts, and the usage event);
//   - fallback: whether the request moved to the fallback model, exactly
//     when the case says it must;
//   - billing: the request's usage event, found by request id in the usage
//     stream: status, error type, tokens (the mock's exact counts, or the
//     documented o200k estimate of what was sent and delivered), cost at the
//     expected price, zero for requests nobody answered;
//   - client: what the caller sees: status, headers, the OpenAI error shape,
//     the answer, and how a stream ends ([DONE], or one error event).
//
// Each request carries its fault in the body's "mock" object (see
// pkg/mockllm); the fallback provider sends X-Mock-Healthy: 1, so the same
// mock fails the primary and serves the fallback. Run runs the matrix;
// tollctl verify prints its report.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/tokenize"
)

// Target is one configured target of the kit's routes and its price.
type Target struct {
	Provider string // provider name, as in x-tollgate-provider
	Model    string // upstream model name, as in x-tollgate-model
	Price    pricing.Price
}

// Deployment returns "provider/model", as usage events name targets.
func (t Target) Deployment() string { return t.Provider + "/" + t.Model }

// Routes is what the kit expects of the gateway's config: the model it
// calls, whose single target is Primary and whose fallback model is served
// by Backup.
type Routes struct {
	Model         string // the model every case calls
	FallbackModel string // Model's fallback
	Primary       Target
	Backup        Target
	UnknownModel  string // a model the gateway must not know
}

// DefaultRoutes returns the routes of deploy/verify/tollgate.yaml.
func DefaultRoutes() Routes {
	return Routes{
		Model:         "verify-chat",
		FallbackModel: "verify-backup",
		Primary:       Target{Provider: "verify-primary", Model: "verify-primary", Price: pricing.Price{InputPerM: 1_000_000_000, OutputPerM: 2_000_000_000}},
		Backup:        Target{Provider: "verify-backup", Model: "verify-backup", Price: pricing.Price{InputPerM: 3_000_000_000, OutputPerM: 6_000_000_000}},
		UnknownModel:  "verify-no-such-model",
	}
}

// Options configure a run.
type Options struct {
	// Gateway is the gateway's base URL, e.g. http://127.0.0.1:8090.
	Gateway string
	// Token is a bearer token the gateway accepts for Routes' models.
	Token string
	// JetStream reads the usage events; nil leaves billing "not checked".
	JetStream jetstream.JetStream
	// Cases names the cases to run; empty runs every case.
	Cases []string
	// Routes are the expected routes. Default DefaultRoutes().
	Routes *Routes
	// Wait bounds how long the run waits for usage events after the last
	// case. Default 10s.
	Wait time.Duration
	// Client sends the requests. Default: a client with a 60 s timeout.
	Client *http.Client
	// Estimator counts tokens the way the gateway estimates them. Default
	// tokenize.New().
	Estimator *tokenize.Estimator
}

// Verdict is the outcome of one check.
type Verdict string

// Verdicts.
const (
	Pass       Verdict = "PASS"
	Fail       Verdict = "FAIL"
	NotChecked Verdict = "not checked"
)

// Check is one column of a case's result: the verdict and what was seen
// (for a failure, why).
type Check struct {
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
}

// Result is the outcome of one case.
type Result struct {
	Case      string `json:"case"`
	Summary   string `json:"summary"`
	RequestID string `json:"request_id"`
	Routing   Check  `json:"routing"`
	Fallback  Check  `json:"fallback"`
	Billing   Check  `json:"billing"`
	Client    Check  `json:"client"`
}

// Checks returns the four columns in report order.
func (r *Result) Checks() []Check { return []Check{r.Routing, r.Fallback, r.Billing, r.Client} }

// OK reports whether no column failed.
func (r *Result) OK() bool {
	for _, c := range r.Checks() {
		if c.Verdict == Fail {
			return false
		}
	}
	return true
}

// Report is the outcome of a run.
type Report struct {
	OK             bool      `json:"ok"`
	Gateway        string    `json:"gateway"`
	BillingChecked bool      `json:"billing_checked"`
	Results        []*Result `json:"cases"`
}

// ErrUnknownCase is returned by Run for a case name the matrix lacks.
var ErrUnknownCase = errors.New("unknown case")

// Run sends every selected case to the gateway, then reads their usage
// events (when o.JetStream is set) and checks each case. A gateway that
// answers wrongly is reported in the Report; an error means the run could
// not be made (bad options, unknown case, usage stream missing).
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Gateway == "" || o.Token == "" {
		return nil, errors.New("conformance: gateway URL and token are required")
	}
	routes := DefaultRoutes()
	if o.Routes != nil {
		routes = *o.Routes
	}
	cases, err := Select(routes, o.Cases)
	if err != nil {
		return nil, err
	}
	if o.Wait <= 0 {
		o.Wait = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 60 * time.Second}
	}
	if o.Estimator == nil {
		o.Estimator = tokenize.New()
	}
	var ev *eventReader
	if o.JetStream != nil {
		if ev, err = newEventReader(ctx, o.JetStream); err != nil {
			return nil, err
		}
	}
	run := newRunID()
	gw := strings.TrimRight(o.Gateway, "/")
	seen := make([]*observation, len(cases))
	for i := range cases {
		c := &cases[i]
		seen[i] = send(ctx, o.Client, gw, o.Token, c, c.requestID(run))
		if c.Settle > 0 {
			if err := sleep(ctx, c.Settle); err != nil {
				return nil, err
			}
		}
	}
	var events map[string]*event
	if ev != nil {
		ids := make([]string, len(seen))
		for i, s := range seen {
			ids[i] = s.requestID
		}
		if events, err = ev.collect(ctx, ids, o.Wait); err != nil {
			return nil, err
		}
	}
	rep := &Report{OK: true, Gateway: gw, BillingChecked: ev != nil}
	for i := range cases {
		c := &cases[i]
		k := checker{c: c, o: seen[i], routes: &routes, est: o.Estimator}
		e := events[seen[i].requestID] // nil without JetStream or without an event
		res := &Result{Case: c.Name, Summary: c.Summary, RequestID: seen[i].requestID,
			Routing: k.routing(e), Fallback: k.fallback(e), Client: k.client()}
		res.Billing = Check{Verdict: NotChecked, Detail: "usage events not read (no NATS given)"}
		if ev != nil {
			res.Billing = k.billing(e, o.Wait)
		}
		rep.OK = rep.OK && res.OK()
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// Select returns the cases named (all when names is empty), in matrix
// order.
func Select(routes Routes, names []string) ([]Case, error) {
	all := Cases(routes)
	if len(names) == 0 {
		return all, nil
	}
	var out []Case
	for _, c := range all {
		if slices.Contains(names, c.Name) {
			out = append(out, c)
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(all, func(c Case) bool { return c.Name == n }) {
			return nil, fmt.Errorf("%w %q (cases: %s)", ErrUnknownCase, n, strings.Join(Names(routes), ", "))
		}
	}
	return out, nil
}

// Names lists the case names in matrix order.
func Names(routes Routes) []string {
	var out []string
	for _, c := range Cases(routes) {
		out = append(out, c.Name)
	}
	return out
}

// newRunID returns 8 random hex digits that make this run's request ids
// unique.
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
