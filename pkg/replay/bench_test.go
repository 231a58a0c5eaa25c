package replay

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// BenchmarkReplayNDJSON reads 10,000 events from an embedded NATS server
// and writes them as NDJSON to io.Discard; events/s is reported.
func BenchmarkReplayNDJSON(b *testing.B) {
	js, err := jetstream.New(natstest.Connect(b, natstest.Start(b)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	const n = 10_000
	for i := range n {
		data, _ := proto.Marshal(&usagev1.UsageEvent{EventId: fmt.Sprint(i), Dept: "eng", ServedModel: "gpt-5",
			PromptTokens: 1000, CompletionTokens: 100, Timestamp: time.Now().UnixNano()})
		if _, err := js.PublishAsync(usage.Subject("eng"), data); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		st, err := Run(ctx, js, Options{Reprice: pricing.Default()}, NewNDJSON(io.Discard))
		if err != nil || st.Events != n {
			b.Fatalf("%+v %v", st, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReprice prices one event; 0 allocs expected.
func BenchmarkReprice(b *testing.B) {
	t := pricing.Default()
	ev := &usagev1.UsageEvent{ServedModel: "gpt-5-2025-08-07", PromptTokens: 1000, CompletionTokens: 100}
	b.ReportAllocs()
	for range b.N {
		if !Reprice(ev, t) {
			b.Fatal("no price")
		}
	}
}
