package budget

import (
	"context"
	"errors"
	"flag"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
)

func TestStartTracker(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	limits, err := ParseLimits([]config.BudgetLimit{{Scope: "dept", Value: "eng", AmountUSD: "10", Period: "month"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	tr, err := StartTracker(gctx, g, js, 1, limits, &LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Ready():
	default:
		t.Fatal("StartTracker returned before the totals were loaded")
	}
	if _, err := js.KeyValue(ctx, Bucket); err != nil {
		t.Fatalf("spend bucket: %v", err)
	}
	if _, err := js.KeyValue(ctx, LeaseBucket); err != nil {
		t.Fatalf("leases bucket: %v", err)
	}
	if r := tr.Report(); len(r) != 1 {
		t.Errorf("report %+v, want the one limit", r)
	}
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("tracker: %v", err)
	}
}

// TestConsumerFlags: the consumer flags' defaults, their values, and which
// one a program without a consumer names when refusing them.
func TestConsumerFlags(t *testing.T) {
	const d = DefaultFoldInterval
	tests := []struct {
		name    string
		args    []string
		want    ConsumerOptions
		wantSet string
	}{
		{"defaults", nil, ConsumerOptions{WebhookFormat: WebhookJSON, ForecastAlerts: true, FoldInterval: d}, ""},
		{"anomaly", []string{"-anomaly-factor", "3"}, ConsumerOptions{WebhookFormat: WebhookJSON, ForecastAlerts: true, AnomalyFactor: 3, FoldInterval: d}, "anomaly-factor"},
		{"webhook", []string{"-webhook", "http://hook", "-webhook-format", "slack", "-forecast-alerts=false"},
			ConsumerOptions{WebhookURL: "http://hook", WebhookFormat: WebhookSlack, FoldInterval: d}, "forecast-alerts"}, // the first in name order
		{"forecast off", []string{"-forecast-alerts=false"}, ConsumerOptions{WebhookFormat: WebhookJSON, FoldInterval: d}, "forecast-alerts"},
		{"fold interval", []string{"-fold-interval", "1s"}, ConsumerOptions{WebhookFormat: WebhookJSON, ForecastAlerts: true, FoldInterval: time.Second}, "fold-interval"},
		{"no fold interval", []string{"-fold-interval", "0"}, ConsumerOptions{WebhookFormat: WebhookJSON, ForecastAlerts: true, FoldInterval: -1}, "fold-interval"},
		{"other flag", []string{"-config", "x.yaml"}, ConsumerOptions{WebhookFormat: WebhookJSON, ForecastAlerts: true, FoldInterval: d}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o ConsumerOptions
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.String("config", "", "")
			RegisterConsumerFlags(fs, &o)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(o, tc.want) {
				t.Errorf("options %+v, want %+v", o, tc.want)
			}
			if got := ConsumerFlagSet(fs); got != tc.wantSet {
				t.Errorf("ConsumerFlagSet = %q, want %q", got, tc.wantSet)
			}
		})
	}
}
