package console

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
)

// EventsInterval is how often GET /ui/events looks at the totals the
// gateway watches (in memory) and sends those that changed.
const EventsInterval = time.Second

// eventsIdle is how long the stream stays silent before it sends a
// comment, which keeps proxies from closing it and finds a client gone.
const eventsIdle = 15 * time.Second

// eventsWriteTimeout bounds each write of the event stream, so that a
// client that stopped reading does not hold the handler.
const eventsWriteTimeout = 10 * time.Second

// eventsPage serves GET /ui/events: server-sent events named totals, one
// per current day or month total the user sees (LiveTotal as JSON), all
// of them first and then each one that changes. The stream ends when the
// client goes away.
func (c *Console) eventsPage(w http.ResponseWriter, r *http.Request) {
	d := c.data()
	if d == nil {
		c.notConfigured(w, r)
		return
	}
	v := viewOf(r, access.SpendView)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sent := map[[2]string]LiveTotal{}
	tick := time.NewTicker(EventsInterval)
	defer tick.Stop()
	var last time.Time
	for {
		var buf []byte
		for _, t := range d.Live(v) {
			k := [2]string{t.Scope, t.Period}
			if old, ok := sent[k]; ok && old == t {
				continue
			}
			sent[k] = t
			b, err := json.Marshal(t)
			if err != nil {
				return
			}
			buf = append(buf, "event: totals\ndata: "...)
			buf = append(buf, b...)
			buf = append(buf, "\n\n"...)
		}
		if len(buf) == 0 && time.Since(last) >= eventsIdle {
			buf = []byte(": idle\n\n")
		}
		if len(buf) > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
			if _, err := w.Write(buf); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			last = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}
