package audit

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register exposes the Recorder's Stats on reg as
// tollgate_audit_events_total{outcome="recorded"|"failed"}. A failed event
// is a change nobody can find in the audit log: alert on any increase.
func (r *Recorder) Register(reg prometheus.Registerer) error {
	for outcome, f := range map[string]func() uint64{
		"recorded": r.rec.Load,
		"failed":   r.err.Load,
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "tollgate_audit_events_total",
			Help:        "Audit events by outcome: recorded in the TOLLGATE_AUDIT stream, or failed (the change was made, its event is lost).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 { return float64(f()) })
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register audit metrics: %w", err)
		}
	}
	return nil
}
