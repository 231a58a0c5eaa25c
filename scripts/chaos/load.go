package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
)

// loadSpec is one stream of requests: one gateway, one model, stream or
// not, open loop at a rate, or closed loop with a number of clients.
type loadSpec struct {
	name    string
	gw      int
	model   string
	stream  bool
	rate    float64 // open loop, requests per second
	clients int     // closed loop when rate is 0
	limit   int64   // closed loop: at most this many requests
	// mock settings, forwarded by the gateway to mockllm in the body.
	chunks, chunkDelayMS, latencyMS int
	maxTokens                       int
}

// body returns the request body of s.
func (s loadSpec) body() ([]byte, error) {
	b := map[string]any{
		"model":    s.model,
		"messages": []map[string]string{{"role": "user", "content": "the quick brown fox jumps over a lazy dog while seven bright gateways route tokens"}},
	}
	if s.stream {
		b["stream"] = true
	}
	if s.maxTokens > 0 {
		b["max_tokens"] = s.maxTokens
	}
	mock := map[string]int{}
	if s.chunks > 0 {
		mock["chunks"] = s.chunks
	}
	if s.chunkDelayMS > 0 {
		mock["chunk_delay_ms"] = s.chunkDelayMS
	}
	if s.latencyMS > 0 {
		mock["latency_ms"] = s.latencyMS
	}
	if len(mock) > 0 {
		b["mock"] = mock
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("build body: %w", err)
	}
	return out, nil
}

// outcome is what the clients saw, summed over a scenario's load.
type outcome struct {
	// Sent counts requests with an outcome; OK the fully valid answers.
	Sent, OK, Errors int64
	// Answered counts responses that carried an HTTP status: each of them
	// passed through a gateway and must have produced one usage event.
	Answered int64
	// ErrorsByKind and Status are loadgen's error kinds and HTTP statuses.
	ErrorsByKind map[string]int64
	Status       map[string]int64
	// ByLoad is the report of each load stream, by its name.
	ByLoad map[string]*loadgen.Report
}

// add merges one load stream's report into o.
func (o *outcome) add(name string, rep *loadgen.Report) {
	if o.ErrorsByKind == nil {
		o.ErrorsByKind, o.Status, o.ByLoad = map[string]int64{}, map[string]int64{}, map[string]*loadgen.Report{}
	}
	o.ByLoad[name] = rep
	o.Sent += rep.Requests
	o.OK += rep.Successes
	o.Errors += rep.Errors
	for k, n := range rep.ErrorsByKind {
		o.ErrorsByKind[k] += n
	}
	for k, n := range rep.StatusCodes {
		o.Status[k] += n
		if code, err := strconv.Atoi(k); err == nil && code > 0 {
			o.Answered += n
		}
	}
}

// runLoad runs every spec for d against the rig's gateways with token and
// returns once all of them ended (requests in flight finish or time out).
func (r *rig) runLoad(ctx context.Context, specs []loadSpec, token string, d time.Duration) (outcome, error) {
	var (
		mu   sync.Mutex
		out  outcome
		errs []error
		wg   sync.WaitGroup
	)
	for _, s := range specs {
		body, err := s.body()
		if err != nil {
			return out, err
		}
		cfg := loadgen.Config{
			URL:         fmt.Sprintf("http://%s/v1/chat/completions", r.gws[s.gw].addr()),
			Token:       token,
			Body:        body,
			BodyInfo:    s.name,
			Stream:      s.stream,
			Rate:        s.rate,
			Concurrency: s.clients,
			Requests:    s.limit,
			MaxInflight: 500,
			Duration:    d,
			Timeout:     30 * time.Second,
			SampleEvery: time.Second,
		}
		wg.Go(func() {
			rep, err := loadgen.Run(ctx, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("load %s: %w", s.name, err))
				return
			}
			out.add(s.name, rep)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return out, errs[0]
	}
	return out, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
