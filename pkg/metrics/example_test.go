package metrics_test

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/pkg/metrics"
)

// The gateway builds its metrics once, resolves a Route per configured
// (model, provider, endpoint) at config load, and records each finished
// request on the hot path.
func Example() {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		panic(err)
	}
	// Publisher and budget gauges are read at scrape time.
	_ = metrics.RegisterPublisher(reg, func() metrics.PublisherStats {
		return metrics.PublisherStats{Queued: 1, Published: 1}
	})

	chat := m.Route("gpt-4o-mini", "openai", "chat") // at config load
	chat.Observe(200, 850*time.Millisecond, 840*time.Millisecond, 120*time.Millisecond, true)
	m.Tokens("finance", "gpt-4o-mini", 1200, 300, 0, 0, 360_000)

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "tollgate_requests_total" {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	// Output: tollgate_requests_total 1
}
