package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// AlertSubjectPrefix is followed by the scope name ("tollgate.budget.alerts.dept")
// on the NATS subject alerts are published to.
const AlertSubjectPrefix = "tollgate.budget.alerts."

// Alert is the JSON body published (and posted to the webhook) when a total
// reaches a threshold of a configured limit.
type Alert struct {
	Scope string `json:"scope"`
	// Value is the scope value ("" for global).
	Value       string `json:"value"`
	Period      string `json:"period"`
	PeriodStart string `json:"period_start"`
	// LimitNanoUSD is the limit and SpendNanoUSD the total's spend when the
	// threshold was reached, in nano-USD.
	LimitNanoUSD int64 `json:"limit_nano_usd"`
	SpendNanoUSD int64 `json:"spend_nano_usd"`
	// Threshold is the fraction of the limit reached (0.5, 0.8, 1.0, ...).
	Threshold float64 `json:"threshold"`
}

// alertRecord is a total's announced thresholds, as stored in AlertBucket:
// limit in nano-USD (decimal string) -> highest threshold alerted, in ppm.
type alertRecord struct {
	rev   uint64
	level map[string]uint32
}

// thresholdAmount returns limit*ppm/1e6 rounded down, or MaxInt64 when that
// does not fit.
func thresholdAmount(limit int64, ppm uint32) int64 {
	hi, lo := bits.Mul64(uint64(limit), uint64(ppm))
	if hi >= 1e6 {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, 1e6)
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

// highest returns the largest threshold (ppm) that spend reaches of limit, or 0.
func (c *Consumer) highest(limit, spend int64) uint32 {
	var h uint32
	for _, t := range c.thresh {
		if spend >= thresholdAmount(limit, t) {
			h = t
		}
	}
	return h
}

// checkAlerts announces every threshold newly reached by the totals written
// in this batch. A crossing is first recorded in AlertBucket with
// optimistic concurrency and only then published, so it is announced once
// even with several consumers and restarts (a crash between the two loses
// that one alert rather than repeating it).
func (c *Consumer) checkAlerts(ctx context.Context) error {
	if len(c.thresh) == 0 {
		return nil
	}
	if len(c.alerts) > c.o.CacheSize {
		clear(c.alerts)
	}
	for _, w := range c.written {
		if err := c.alertTotal(ctx, w.id, w.spend); err != nil {
			return err
		}
	}
	return nil
}

func (c *Consumer) alertTotal(ctx context.Context, id TotalID, spend int64) error {
	var ls []Limit
	for _, l := range c.limits.star[id.Scope] {
		if l.Period == id.Period {
			ls = append(ls, l)
		}
	}
	if id.Scope != ScopeGlobal {
		for _, l := range c.limits.exact[id.Scope][id.Value] {
			if l.Period == id.Period {
				ls = append(ls, l)
			}
		}
		for _, l := range c.limits.anyDept[id.Scope][qualifiedName(id.Value)] {
			if l.Period == id.Period {
				ls = append(ls, l)
			}
		}
	}
	reached := false
	for _, l := range ls {
		if c.highest(l.AmountNano, spend) > 0 {
			reached = true
		}
	}
	if !reached {
		return nil
	}
	for range 10 {
		rec, err := c.alertRecord(ctx, id)
		if err != nil {
			return err
		}
		next := make(map[string]uint32, len(rec.level)+len(ls))
		for k, v := range rec.level {
			next[k] = v
		}
		var fire []Alert
		for _, l := range ls {
			k := strconv.FormatInt(l.AmountNano, 10)
			prev, h := next[k], c.highest(l.AmountNano, spend)
			for _, t := range c.thresh {
				if t > prev && t <= h {
					fire = append(fire, c.alert(id, l.AmountNano, spend, t))
				}
			}
			next[k] = max(prev, h)
		}
		if len(fire) == 0 {
			return nil
		}
		data, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("encode alert record: %w", err)
		}
		var rev uint64
		if rec.rev == 0 {
			rev, err = c.alertKV.Create(ctx, id.Key(), data)
		} else {
			rev, err = c.alertKV.Update(ctx, id.Key(), data, rec.rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			delete(c.alerts, id)
			continue
		}
		if err != nil {
			return fmt.Errorf("record alert %s: %w", id.Key(), err)
		}
		c.alerts[id] = &alertRecord{rev: rev, level: next}
		for _, a := range fire {
			c.publishAlert(a)
		}
		return nil
	}
	return fmt.Errorf("record alert %s: still conflicting", id.Key())
}

func (c *Consumer) alert(id TotalID, limit, spend int64, ppm uint32) Alert {
	return Alert{Scope: id.Scope.String(), Value: id.Value, Period: id.Period.String(),
		PeriodStart: id.PeriodStart(), LimitNanoUSD: limit, SpendNanoUSD: spend,
		Threshold: float64(ppm) / 1e6}
}

func (c *Consumer) alertRecord(ctx context.Context, id TotalID) (*alertRecord, error) {
	if r := c.alerts[id]; r != nil {
		return r, nil
	}
	r := &alertRecord{level: map[string]uint32{}}
	e, err := c.alertKV.Get(ctx, id.Key())
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read alert record %s: %w", id.Key(), err)
	default:
		if err := json.Unmarshal(e.Value(), &r.level); err != nil {
			return nil, fmt.Errorf("decode alert record %s: %w", id.Key(), err)
		}
		r.rev = e.Revision()
	}
	c.alerts[id] = r
	return r, nil
}

// publishAlert sends a to NATS (core publish: at most once, to whoever
// listens) and queues it for the webhook.
func (c *Consumer) publishAlert(a Alert) {
	body, err := json.Marshal(a)
	if err != nil {
		return // cannot happen: Alert holds only strings and numbers
	}
	c.m.alerts.Inc()
	if err := c.js.Conn().Publish(AlertSubjectPrefix+a.Scope, body); err != nil {
		c.log.Warn("budget alert not published", "scope", a.Scope, "value", a.Value, "err", err)
	}
	if c.hook != nil {
		c.hook.enqueue(body, c.log)
	}
}

// webhook posts alerts to a URL from one goroutine, through a bounded queue.
type webhook struct {
	url    string
	client *http.Client
	q      chan []byte
	failed prometheus.Counter
}

func newWebhook(o ConsumerOptions, failed prometheus.Counter) *webhook {
	timeout := o.WebhookTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	client := o.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: timeout}
	}
	n := o.WebhookQueue
	if n <= 0 {
		n = 256
	}
	return &webhook{url: o.WebhookURL, client: client, q: make(chan []byte, n), failed: failed}
}

// enqueue never blocks: a full queue drops the alert.
func (w *webhook) enqueue(body []byte, log *slog.Logger) {
	select {
	case w.q <- body:
	default:
		w.failed.Inc()
		log.Warn("budget alert webhook queue full; alert dropped")
	}
}

func (w *webhook) run(ctx context.Context, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case body := <-w.q:
			if err := w.post(ctx, body); err != nil {
				w.failed.Inc()
				log.Warn("budget alert webhook", "url", w.url, "err", err)
			}
		}
	}
}

func (w *webhook) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
