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
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/pricing"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// AlertSubjectPrefix is followed by the scope name ("tollgate.budget.alerts.dept")
// on the NATS subject alerts are published to.
const AlertSubjectPrefix = "tollgate.budget.alerts."

// Alert kinds (Alert.Kind).
const (
	// AlertThreshold: a total reached a fraction of a limit.
	AlertThreshold = "threshold"
	// AlertForecast: the spend projected at a limit's period end crosses
	// the limit (Project).
	AlertForecast = "forecast"
	// AlertAnomaly: a scope value's spend in one hour is over a factor of
	// its baseline hourly rate (SpikeOf).
	AlertAnomaly = "anomaly"
)

// Alert is the JSON body published (and posted to the webhook, as is or
// as a Slack message) when a total reaches a threshold of a configured
// limit, when its forecast crosses the limit, or when a scope value's
// hourly spend is anomalous.
type Alert struct {
	// Kind is AlertThreshold, AlertForecast or AlertAnomaly.
	Kind  string `json:"kind"`
	Scope string `json:"scope"`
	// Value is the scope value ("" for global).
	Value string `json:"value"`
	// Period and PeriodStart name the total; for an anomaly, Period is
	// "hour" and PeriodStart the hour's start (RFC 3339, UTC).
	Period      string `json:"period"`
	PeriodStart string `json:"period_start"`
	// LimitNanoUSD is the limit (0 for an anomaly) and SpendNanoUSD the
	// total's spend when the alert was raised (for an anomaly, the hour's
	// spend), in nano-USD.
	LimitNanoUSD int64 `json:"limit_nano_usd"`
	SpendNanoUSD int64 `json:"spend_nano_usd"`
	// Threshold is the fraction of the limit reached (0.5, 0.8, 1.0, ...);
	// 0 for other kinds.
	Threshold float64 `json:"threshold"`
	// RateNanoUSDPerHour is the spend rate over the trailing window: the
	// forecast's rate, or an anomaly's baseline.
	RateNanoUSDPerHour int64 `json:"rate_nano_usd_per_hour,omitempty"`
	// ProjectedNanoUSD and ExhaustsAt (RFC 3339) are a forecast alert's
	// projection at the period's end and exhaustion time.
	ProjectedNanoUSD int64  `json:"projected_nano_usd,omitempty"`
	ExhaustsAt       string `json:"exhausts_at,omitempty"`
	// Factor is an anomaly alert's configured factor.
	Factor float64 `json:"factor,omitempty"`
}

// slackText is the alert as one line of a Slack message.
func (a *Alert) slackText() string {
	v := a.Value
	if a.Scope == "global" {
		v = "all"
	}
	who := fmt.Sprintf("%s %q", a.Scope, v)
	switch a.Kind {
	case AlertForecast:
		s := fmt.Sprintf(":chart_with_upwards_trend: Tollgate budget forecast: %s %s %s is projected to spend %s USD of its %s USD limit (%s USD/h)",
			who, a.Period, a.PeriodStart, pricing.FormatUSD(a.ProjectedNanoUSD), pricing.FormatUSD(a.LimitNanoUSD), pricing.FormatUSD(a.RateNanoUSDPerHour))
		if a.ExhaustsAt != "" {
			s += ", exhausted at " + a.ExhaustsAt
		}
		return s
	case AlertAnomaly:
		return fmt.Sprintf(":rotating_light: Tollgate spend anomaly: %s spent %s USD in the hour from %s, over %g times its baseline of %s USD/h",
			who, pricing.FormatUSD(a.SpendNanoUSD), a.PeriodStart, a.Factor, pricing.FormatUSD(a.RateNanoUSDPerHour))
	}
	return fmt.Sprintf(":warning: Tollgate budget alert: %s %s %s reached %g%% of its %s USD limit (spent %s USD)",
		who, a.Period, a.PeriodStart, 100*a.Threshold, pricing.FormatUSD(a.LimitNanoUSD), pricing.FormatUSD(a.SpendNanoUSD))
}

// Webhook formats (ConsumerOptions.WebhookFormat).
const (
	WebhookJSON  = "json"
	WebhookSlack = "slack"
)

func checkWebhookFormat(f string) error {
	if f != "" && f != WebhookJSON && f != WebhookSlack {
		return fmt.Errorf("webhook format %q: want json or slack", f)
	}
	return nil
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
	if len(c.thresh) == 0 && !c.o.ForecastAlerts && c.o.AnomalyFactor <= 1 {
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
	if c.o.AnomalyFactor > 1 {
		return c.checkAnomalies(ctx)
	}
	return nil
}

// limitsOf returns the configured limits of id's scope value and period.
func (c *Consumer) limitsOf(id TotalID) []Limit {
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
	return ls
}

// alertCandidate is an alert a total may owe: level under key in the
// total's alert record, and the alerts due when the record holds prev <
// level.
type alertCandidate struct {
	key   string
	level uint32
	fire  func(prev uint32) []Alert
}

func (c *Consumer) alertTotal(ctx context.Context, id TotalID, spend int64) error {
	ls := c.limitsOf(id)
	var cands []alertCandidate
	for _, l := range ls {
		if h := c.highest(l.AmountNano, spend); h > 0 {
			limit := l.AmountNano
			cands = append(cands, alertCandidate{key: strconv.FormatInt(limit, 10), level: h, fire: func(prev uint32) []Alert {
				var fire []Alert
				for _, t := range c.thresh {
					if t > prev && t <= h {
						fire = append(fire, c.alert(id, limit, spend, t))
					}
				}
				return fire
			}})
		}
	}
	now := c.now()
	if c.o.ForecastAlerts && len(ls) > 0 && id.Period != PeriodTotal && id.Start == periodStarts(now.UnixNano())[id.Period] {
		days, err := c.dayTotals(ctx, id.Scope, id.Value, periodStarts(now.UnixNano())[PeriodDay])
		if err != nil {
			return err
		}
		for _, l := range ls {
			f := Project(l.AmountNano, spend, id.PeriodEnd(), now, days)
			if !f.Crosses {
				continue
			}
			a := c.alert(id, l.AmountNano, spend, 0)
			a.Kind, a.RateNanoUSDPerHour, a.ProjectedNanoUSD = AlertForecast, f.RateNanoPerHour, f.ProjectedNano
			if !f.ExhaustsAt.IsZero() {
				a.ExhaustsAt = f.ExhaustsAt.UTC().Format(time.RFC3339)
			}
			cands = append(cands, alertCandidate{key: "forecast:" + strconv.FormatInt(l.AmountNano, 10), level: 1,
				fire: func(uint32) []Alert { return []Alert{a} }})
		}
	}
	return c.announce(ctx, id, cands)
}

// announce raises every candidate whose level is above the one recorded
// for id: it records the new levels in AlertBucket with optimistic
// concurrency first and only then publishes, so that an alert is
// announced once even with several consumers and restarts.
func (c *Consumer) announce(ctx context.Context, id TotalID, cands []alertCandidate) error {
	if len(cands) == 0 {
		return nil
	}
	for range 10 {
		rec, err := c.alertRecord(ctx, id)
		if err != nil {
			return err
		}
		next := make(map[string]uint32, len(rec.level)+len(cands))
		for k, v := range rec.level {
			next[k] = v
		}
		var fire []Alert
		for _, cd := range cands {
			if prev := next[cd.key]; cd.level > prev {
				fire = append(fire, cd.fire(prev)...)
				next[cd.key] = cd.level
			}
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

// forecastState is what forecast and anomaly alerts keep between folds.
type forecastState struct {
	// days memoizes past day totals read from the spend bucket.
	days map[TotalID]int64
	// hours is the spend of the current hour per limited scope value, from
	// the events this Consumer applied (so it starts from zero after a
	// restart: an anomaly may then be missed, never invented).
	hours map[scopeHour]int64
}

type scopeHour struct {
	scope Scope
	value string
	hour  int64 // hours since 1970
}

// dayTotals returns the day totals of a scope value over the forecast
// window ending on today: from the totals cache, then the memo of past
// days, then the spend bucket.
func (c *Consumer) dayTotals(ctx context.Context, sc Scope, v string, today int32) ([]DayTotal, error) {
	if c.fc.days == nil || len(c.fc.days) > c.o.CacheSize {
		c.fc.days = make(map[TotalID]int64)
	}
	days := make([]DayTotal, 0, ForecastWindowDays)
	for d := today - (ForecastWindowDays - 1); d <= today; d++ {
		id := TotalID{Scope: sc, Value: v, Period: PeriodDay, Start: d}
		cost, ok := c.fc.days[id]
		if ct := c.cache[id]; ct != nil {
			cost, ok = ct.cost, true
		}
		if !ok {
			e, err := c.spend.Get(ctx, id.Key())
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
			case err != nil:
				return nil, fmt.Errorf("read day total %s: %w", id.Key(), err)
			default:
				var st usagev1.SpendTotal
				if err := proto.Unmarshal(e.Value(), &st); err != nil {
					return nil, fmt.Errorf("decode day total %s: %w", id.Key(), err)
				}
				cost = st.CostNanoUsd
			}
			if d < today {
				c.fc.days[id] = cost
			}
		}
		if cost > 0 {
			days = append(days, DayTotal{Day: d, SpendNano: cost})
		}
	}
	return days, nil
}

// hasLimit reports whether any configured limit applies to the scope value.
func (c *Consumer) hasLimit(sc Scope, v string) bool {
	if len(c.limits.star[sc]) > 0 {
		return true
	}
	return sc != ScopeGlobal && (len(c.limits.exact[sc][v]) > 0 || len(c.limits.anyDept[sc][qualifiedName(v)]) > 0)
}

// checkAnomalies adds the fold's events of the current hour to the hourly
// spend of every limited scope value they count towards, and raises an
// anomaly alert, once per scope value and hour, for each whose hour is
// over AnomalyFactor times its baseline (SpikeOf): the hourly rate of its
// day totals over the trailing window (Project).
func (c *Consumer) checkAnomalies(ctx context.Context) error {
	now := c.now()
	hour := now.Unix() / 3600
	if c.fc.hours == nil {
		c.fc.hours = make(map[scopeHour]int64)
	}
	for k := range c.fc.hours {
		if k.hour != hour {
			delete(c.fc.hours, k)
		}
	}
	touched := map[scopeHour]struct{}{}
	for i := range c.events {
		e := &c.events[i]
		if e.hour != hour {
			continue
		}
		for sc := range numScopes {
			v := e.vals[sc]
			if sc != ScopeGlobal && v == "" || !c.hasLimit(sc, v) {
				continue
			}
			k := scopeHour{sc, v, hour}
			c.fc.hours[k] += e.cost
			touched[k] = struct{}{}
		}
	}
	today := periodStarts(now.UnixNano())[PeriodDay]
	for k := range touched {
		days, err := c.dayTotals(ctx, k.scope, k.value, today)
		if err != nil {
			return err
		}
		base := Project(0, 0, time.Time{}, now, days).RateNanoPerHour
		spent := c.fc.hours[k]
		if !SpikeOf(spent, base, c.o.AnomalyFactor) {
			continue
		}
		a := Alert{Kind: AlertAnomaly, Scope: k.scope.String(), Value: k.value, Period: "hour",
			PeriodStart: time.Unix(hour*3600, 0).UTC().Format(time.RFC3339), SpendNanoUSD: spent,
			RateNanoUSDPerHour: base, Factor: c.o.AnomalyFactor}
		id := TotalID{Scope: k.scope, Value: k.value, Period: PeriodDay, Start: today}
		if err := c.announce(ctx, id, []alertCandidate{{key: "anomaly:" + strconv.FormatInt(hour, 10), level: 1,
			fire: func(uint32) []Alert { return []Alert{a} }}}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Consumer) alert(id TotalID, limit, spend int64, ppm uint32) Alert {
	return Alert{Kind: AlertThreshold, Scope: id.Scope.String(), Value: id.Value, Period: id.Period.String(),
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
		if c.o.WebhookFormat == WebhookSlack {
			body, _ = json.Marshal(struct {
				Text string `json:"text"`
			}{a.slackText()})
		}
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
