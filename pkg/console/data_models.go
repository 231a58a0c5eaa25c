package console

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/router"
)

// TrafficWindow is the span of the models page's request and error counts.
const TrafficWindow = 24 * time.Hour

// Models is the models page's data: the gateway's routes and the state of
// each target as its router measures them (circuit, failures in the
// circuit window, time to first token), with each served model's requests
// and errors over TrafficWindow from ClickHouse.
type Models struct {
	Now     time.Time
	Routes  []gateway.RouteInfo
	Targets []router.TargetState
	// Traffic is keyed by served model.
	Traffic map[string]ModelTraffic
	// History is why Traffic is missing, nil otherwise.
	History error
}

// ModelTraffic is one served model's requests and failed requests.
type ModelTraffic struct {
	Requests, Errors uint64
}

// ErrorRate is Errors / Requests, 0 without requests.
func (m ModelTraffic) ErrorRate() float64 {
	if m.Requests == 0 {
		return 0
	}
	return float64(m.Errors) / float64(m.Requests)
}

// Models returns the models page. Routes are not per department: every
// role that may see the page sees them all.
func (d *Data) Models(ctx context.Context) *Models {
	now := d.now()
	m := &Models{Now: now, Traffic: map[string]ModelTraffic{}}
	if d.Routes != nil {
		r := d.Routes()
		m.Routes, m.Targets = r.Models, r.Targets
	}
	conn, err := d.conn()
	if err != nil {
		m.History = err
		return m
	}
	if err := queryRows(ctx, conn, chsql.ConsoleModelTraffic.SQL, []any{now.Add(-TrafficWindow).Unix()}, func(rows chsql.Rows) error {
		var model string
		var t ModelTraffic
		err := rows.Scan(&model, &t.Requests, &t.Errors)
		m.Traffic[model] = t
		return err
	}); err != nil {
		m.History = historyErr("traffic", err)
	}
	return m
}
