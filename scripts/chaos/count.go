package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// counts is what each store holds for one scenario's department.
type counts struct {
	// StreamMsgs counts the dept's events in the stream as a consumer
	// applies them: batches deduplicated by (producer, seq), legacy
	// single-event messages each once. StreamUnique counts the distinct
	// request ids among them, so StreamMsgs - StreamUnique is events
	// repeated (one event id applied twice).
	StreamMsgs, StreamUnique int64
	// StreamRepublished counts batch messages holding a (producer, seq)
	// seen earlier in the stream: republishes after the duplicate window,
	// which consumers skip, so not duplicates. Over the whole stream (a
	// batch holds several depts' events), not only the dept.
	StreamRepublished int64
	StreamCost        int64 // nano-USD, over distinct request ids
	// StreamRecovered counts the distinct request ids whose event was
	// recovered (UsageEvent.recovered: published from a killed gateway's
	// begun record).
	StreamRecovered int64
	// StreamMaxCost is the largest cost of one event.
	StreamMaxCost int64
	// SpentAtFirstRefusal is the cost of the dept's requests that had
	// ended when its first budget_exceeded refusal arrived (-1 when none
	// was refused): how much of a limit was spent before a refusal.
	SpentAtFirstRefusal int64
	// FirstRefusal is the dept limit's check recorded on that refusal's
	// event (what the refusing gateway could still admit, and the
	// request's own worst case), nil when none was refused.
	FirstRefusal *usagev1.BudgetCheck
	// CHRows counts rows in tollgate.usage_events (without FINAL, so an
	// uncollapsed duplicate shows), CHUnique the distinct request ids.
	CHRows, CHUnique int64
	CHCost           int64
	// BudgetRequests and BudgetCost are the dept's all-time spend total in
	// the KV bucket tollgate_spend.
	BudgetRequests, BudgetCost int64
}

// agree reports whether the stream, ClickHouse and the spend total hold
// the same events, once each.
func (c counts) agree() bool {
	return c.StreamMsgs == c.StreamUnique && c.CHRows == c.CHUnique &&
		c.StreamUnique == c.CHUnique && c.StreamUnique == c.BudgetRequests &&
		c.StreamCost == c.CHCost && c.StreamCost == c.BudgetCost
}

// count reads the three stores for dept.
func (r *rig) count(ctx context.Context, dept string) (counts, error) {
	var c counts
	var err error
	if err = r.countStream(ctx, dept, &c); err != nil {
		return c, err
	}
	out, err := r.chQuery(fmt.Sprintf("SELECT count(), uniqExact(request_id), sum(cost_nano_usd) FROM tollgate.usage_events WHERE dept = '%s' FORMAT TSV", dept))
	if err != nil {
		return c, err
	}
	f := strings.Fields(out)
	if len(f) != 3 {
		return c, fmt.Errorf("clickhouse count: unexpected answer %q", out)
	}
	c.CHRows, _ = strconv.ParseInt(f[0], 10, 64)
	c.CHUnique, _ = strconv.ParseInt(f[1], 10, 64)
	c.CHCost, _ = strconv.ParseInt(f[2], 10, 64)
	c.BudgetRequests, c.BudgetCost, err = r.spendTotal(ctx, dept)
	return c, err
}

// streamScan is what countStream has read of the usage stream: it reads
// each message once, across calls and scenarios, and keeps counts per dept.
type streamScan struct {
	next        uint64                     // the next stream sequence to read
	lastSum     uint64                     // checksum of the message at next-1 as read
	applied     map[string]map[uint64]bool // producer -> batch seqs seen
	republished int64
	depts       map[string]*deptCount
	// rescans counts the times the stream no longer held, at next-1, the
	// message read there, and the scan started over: the stream was
	// recreated, or lost messages it had acknowledged and gave their
	// sequences to new ones (a whole cluster killed at once). Kept across
	// the start-overs.
	rescans int
}

// deptCount is one dept's events in the stream.
type deptCount struct {
	events, cost, maxCost int64
	recovered             int64
	requests              map[string]bool // request ids seen
	ends                  []spendEnd      // every charged request's end
	firstRefusal          int64           // unix ns of the first budget refusal; 0 if none
	refusalCheck          *usagev1.BudgetCheck
}

// spendEnd is one charged request: when it ended (unix ns) and its cost.
type spendEnd struct{ at, cost int64 }

// spentBefore sums the cost of the requests that ended by t.
func (d *deptCount) spentBefore(t int64) int64 {
	var n int64
	for _, e := range d.ends {
		if e.at <= t {
			n += e.cost
		}
	}
	return n
}

// countStream reads the usage stream's messages (batches and legacy single
// events) not read yet and fills c's Stream fields with dept's counts.
func (r *rig) countStream(ctx context.Context, dept string, c *counts) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, budget.Stream)
	if err != nil {
		return fmt.Errorf("usage stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("usage stream info: %w", err)
	}
	sc := &r.scan
	changed, err := sc.changed(ctx, s)
	if err != nil {
		return err
	}
	if sc.depts == nil || changed {
		// First call, or the stream's history changed below the scan
		// point: start over, or the messages that took the reused
		// sequences would never be counted.
		if changed {
			sc.rescans++
			fmt.Fprintf(os.Stderr, "chaos: the usage stream no longer holds message %d as read; counting it again from the start\n", sc.next-1)
		}
		*sc = streamScan{next: 1, rescans: sc.rescans, applied: map[string]map[uint64]bool{}, depts: map[string]*deptCount{}}
	}
	if err := sc.read(ctx, s, info.State.LastSeq); err != nil {
		return err
	}
	c.StreamRepublished = sc.republished
	if d := sc.depts[dept]; d != nil {
		c.StreamMsgs, c.StreamUnique, c.StreamCost, c.StreamMaxCost = d.events, int64(len(d.requests)), d.cost, d.maxCost
		c.StreamRecovered = d.recovered
		c.SpentAtFirstRefusal = -1
		if d.firstRefusal != 0 {
			c.SpentAtFirstRefusal = d.spentBefore(d.firstRefusal)
			c.FirstRefusal = d.refusalCheck
		}
	}
	return nil
}

// changed reports whether the stream no longer holds, at sc.next-1, the
// message the scan read there.
func (sc *streamScan) changed(ctx context.Context, s jetstream.Stream) (bool, error) {
	if sc.depts == nil || sc.next <= 1 {
		return false, nil
	}
	m, err := s.GetMsg(ctx, sc.next-1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("usage stream message %d: %w", sc.next-1, err)
	}
	return msgSum(m.Data) != sc.lastSum, nil
}

// msgSum is the checksum streamScan keeps of the last message it read.
func msgSum(data []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64()
}

// read reads the stream from sc.next up to last.
func (sc *streamScan) read(ctx context.Context, s jetstream.Stream, last uint64) error {
	if last < sc.next {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: sc.next,
	})
	if err != nil {
		return fmt.Errorf("read usage stream: %w", err)
	}
	var b usagev1.UsageBatch
	for done := false; !done && sc.next <= last; {
		// No more than are left up to last, so that Fetch returns once it
		// has them rather than wait for a full batch.
		batch, err := cons.Fetch(int(min(1000, last-sc.next+1)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("read usage stream: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read usage stream: %w", err)
			}
			if md.Sequence.Stream > last {
				done = true // read up to last only: the counts are of one moment
				break
			}
			sc.next = md.Sequence.Stream + 1
			sc.lastSum = msgSum(m.Data())
			if err := usage.DecodeMessage(m.Data(), &b); err != nil {
				return fmt.Errorf("decode usage message %d: %w", md.Sequence.Stream, err)
			}
			sc.add(&b)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("read usage stream: %w", err)
		}
		if got == 0 {
			return fmt.Errorf("read usage stream: stopped at %d of %d", sc.next, last)
		}
	}
	return nil
}

// add counts one decoded message: a batch whose (producer, seq) came
// before is a republish and adds nothing.
func (sc *streamScan) add(b *usagev1.UsageBatch) {
	if p := b.ProducerId; p != "" {
		if sc.applied[p] == nil {
			sc.applied[p] = make(map[uint64]bool)
		}
		if sc.applied[p][b.Seq] {
			sc.republished++
			return
		}
		sc.applied[p][b.Seq] = true
	}
	for _, ev := range b.Events {
		d := sc.depts[ev.GetDept()]
		if d == nil {
			d = &deptCount{requests: map[string]bool{}}
			sc.depts[ev.GetDept()] = d
		}
		d.events++
		if !d.requests[ev.GetRequestId()] {
			d.requests[ev.GetRequestId()] = true
			d.cost += ev.GetCostNanoUsd()
			if ev.GetRecovered() {
				d.recovered++
			}
			d.maxCost = max(d.maxCost, ev.GetCostNanoUsd())
			if c := ev.GetCostNanoUsd(); c > 0 {
				d.ends = append(d.ends, spendEnd{at: ev.GetTimestamp() + int64(ev.GetLatencyTotalUs())*1000, cost: c})
			}
			if ev.GetErrorType() == "budget_exceeded" && (d.firstRefusal == 0 || ev.GetTimestamp() < d.firstRefusal) {
				d.firstRefusal = ev.GetTimestamp()
				d.refusalCheck = nil
				for _, b := range ev.GetBudgets() {
					if b.GetScope() == "dept" && b.GetPeriod() == "total" {
						d.refusalCheck = b
					}
				}
			}
		}
	}
}

// spendTotal reads the dept's all-time spend total.
func (r *rig) spendTotal(ctx context.Context, dept string) (requests, cost int64, err error) {
	kv, err := r.js.KeyValue(ctx, budget.Bucket)
	if err != nil {
		return 0, 0, fmt.Errorf("spend bucket: %w", err)
	}
	key := budget.TotalID{Scope: budget.ScopeDept, Value: dept, Period: budget.PeriodTotal}.Key()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("spend total %s: %w", key, err)
	}
	var t usagev1.SpendTotal
	if err := proto.Unmarshal(e.Value(), &t); err != nil {
		return 0, 0, fmt.Errorf("decode spend total %s: %w", key, err)
	}
	return int64(t.GetRequests()), t.GetCostNanoUsd(), nil
}

// chQuery runs one query over ClickHouse's HTTP interface.
func (r *rig) chQuery(q string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+r.ch.HTTPAddr()+"/?query="+url.QueryEscape(q), "text/plain", nil)
	if err != nil {
		return "", fmt.Errorf("clickhouse query: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("clickhouse query: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("clickhouse query: status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// settle polls the stores every second until they agree with each other
// and stay unchanged for two polls (ten when they hold fewer than want
// events: a spool may still be draining), or until timeout; it returns the
// last counts either way.
func (r *rig) settle(ctx context.Context, dept string, want int64, timeout time.Duration) (counts, error) {
	deadline := time.Now().Add(timeout)
	var last counts
	stable := 0
	for {
		c, err := r.count(ctx, dept)
		switch {
		case err != nil:
			stable = 0
		case c == last && c.agree():
			stable++
		default:
			stable = 0
		}
		if err == nil {
			last = c
		}
		if stable >= 10 || stable >= 2 && last.StreamUnique >= want {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, err
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// publisherStates are the tollgate_usage_events_total states the rig reports.
var publisherStates = []string{"spooled", "drained", "failed", "dropped"}

// publisherCounts sums tollgate_usage_events_total by state over the
// gateways' admin /metrics; a gateway that does not answer counts zero.
func (r *rig) publisherCounts() map[string]int64 {
	out := map[string]int64{}
	c := &http.Client{Timeout: 2 * time.Second}
	for _, g := range r.gws {
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", g.admin))
		if err != nil {
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			for _, st := range publisherStates {
				prefix := `tollgate_usage_events_total{state="` + st + `"} `
				if v, ok := strings.CutPrefix(line, prefix); ok {
					f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					out[st] += int64(f)
				}
			}
		}
	}
	return out
}

// propagation measures, for each update of one spend total the rig's KV
// watch receives, the time since the newest event it includes was stored
// in the stream: how late a gateway learns of another gateway's spend.
type propagation struct {
	mu  sync.Mutex // guards max and n
	max time.Duration
	n   int
}

// watch records updates of the spend total key until ctx ends; it returns
// once the watch is established.
func (p *propagation) watch(ctx context.Context, r *rig, key string) error {
	kv, err := r.js.KeyValue(ctx, budget.Bucket)
	if err != nil {
		return fmt.Errorf("spend bucket: %w", err)
	}
	w, err := kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch %s: %w", key, err)
	}
	s, err := r.js.Stream(ctx, budget.Stream)
	if err != nil {
		return fmt.Errorf("usage stream: %w", err)
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			got := time.Now()
			var t usagev1.SpendTotal
			if proto.Unmarshal(e.Value(), &t) != nil {
				continue
			}
			m, err := s.GetMsg(ctx, t.GetAsOfSeq())
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.max = max(p.max, got.Sub(m.Time))
			p.n++
			p.mu.Unlock()
		}
	}()
	return nil
}

// result returns the largest delay seen and the number of updates.
func (p *propagation) result() (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max, p.n
}
