package loadgen

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// target is what all workers share: the client and the request settings.
type target struct {
	client     *fasthttp.HostClient
	cfg        *Config
	uri        string
	stream     bool
	embeddings bool
	chunks     int
	usage      bool // the body asks for a usage chunk
	dims       int
	timeout    time.Duration
}

func newTarget(u *url.URL, cfg *Config, conns int) *target {
	return &target{
		client: &fasthttp.HostClient{
			Addr:                      hostPort(u),
			Name:                      "tollgate-loadgen",
			IsTLS:                     u.Scheme == "https",
			MaxConns:                  conns,
			MaxConnWaitTimeout:        cfg.Timeout,
			MaxIdleConnDuration:       time.Minute,
			MaxIdemponentCallAttempts: 1, // a retry would hide an error
			MaxResponseBodySize:       64 << 20,
		},
		cfg:        cfg,
		uri:        u.String(),
		stream:     cfg.Stream,
		embeddings: cfg.Embeddings,
		chunks:     cfg.Chunks,
		usage:      gjson.GetBytes(cfg.Body, "stream_options.include_usage").Bool(),
		dims:       cfg.Dims,
		timeout:    cfg.Timeout,
	}
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Host + ":443"
	}
	return u.Host + ":80"
}

// recorder collects one worker's measured outcomes; only its worker
// writes it, and it is read after the worker stopped.
type recorder struct {
	lat    []int64 // nanoseconds, successful requests
	ttfc   []int64 // nanoseconds, successful streams
	kinds  [numKinds]int64
	status map[int]int64
	last   time.Time // completion of the last measured request
}

func (r *recorder) add(k kind, status int, lat, ttfc time.Duration, end time.Time) {
	r.kinds[k]++
	if status > 0 {
		if r.status == nil {
			r.status = make(map[int]int64)
		}
		r.status[status]++
	}
	if k == kindOK {
		r.lat = append(r.lat, int64(lat))
		if ttfc > 0 {
			r.ttfc = append(r.ttfc, int64(ttfc))
		}
	}
	if end.After(r.last) {
		r.last = end
	}
}

// worker sends one request at a time and validates its answer.
type worker struct {
	t    *target
	req  fasthttp.Request
	resp fasthttp.Response
	buf  []byte
	sse  sseCheck
	rec  recorder
}

func newWorker(t *target, bufSize int) *worker {
	w := &worker{t: t, buf: make([]byte, bufSize)}
	w.req.SetRequestURI(t.uri)
	w.req.Header.SetMethod(fasthttp.MethodPost)
	w.req.Header.SetContentType("application/json")
	if t.cfg.Token != "" {
		w.req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+t.cfg.Token)
	}
	for _, h := range t.cfg.Headers {
		w.req.Header.Set(h[0], h[1])
	}
	w.req.SetBodyRaw(t.cfg.Body) // shared, never written
	w.resp.StreamBody = t.stream
	return w
}

// one sends a request due at start and records it when measured.
func (w *worker) one(start time.Time, measured bool) {
	k, status, ttfc := w.exchange(start)
	end := time.Now()
	if measured {
		w.rec.add(k, status, end.Sub(start), ttfc, end)
	}
}

// exchange sends the request and validates the answer; the timeout runs
// from start. It returns the outcome, the HTTP status (0 when none was
// received) and, for a stream, the time to its first content chunk.
func (w *worker) exchange(start time.Time) (kind, int, time.Duration) {
	left := w.t.timeout - time.Since(start)
	if left <= 0 {
		return kindTimeout, 0, 0
	}
	w.req.SetTimeout(left)
	if err := w.t.client.Do(&w.req, &w.resp); err != nil {
		return transportKind(err), 0, 0
	}
	status := w.resp.StatusCode()
	if status != fasthttp.StatusOK {
		w.discard()
		return statusKind(status), status, 0
	}
	switch {
	case w.t.stream:
		k, ttfc := w.readStream(start)
		return k, status, ttfc
	case w.t.embeddings:
		return checkEmbeddings(w.resp.Body(), w.t.dims), status, 0
	}
	return checkChat(w.resp.Body()), status, 0
}

// discard reads a little of an unwanted streamed body, so a short error
// answer leaves the connection reusable, and closes it.
func (w *worker) discard() {
	body := w.resp.BodyStream()
	if body == nil {
		return
	}
	for n := 0; n < 64<<10; {
		m, err := body.Read(w.buf)
		n += m
		if err != nil {
			break
		}
	}
	_ = w.resp.CloseBodyStream() // an error here only means the connection is dropped
}

// readStream validates a streamed body as it arrives and closes it.
func (w *worker) readStream(start time.Time) (kind, time.Duration) {
	defer func() { _ = w.resp.CloseBodyStream() }()
	if !bytes.HasPrefix(w.resp.Header.ContentType(), []byte("text/event-stream")) {
		return kindContentType, 0
	}
	body := w.resp.BodyStream()
	if body == nil {
		return kindNoDone, 0
	}
	w.sse.reset(w.t.chunks, w.t.usage)
	var ttfc time.Duration
	for {
		n, err := body.Read(w.buf)
		if n > 0 {
			before := w.sse.content
			w.sse.feed(w.buf[:n])
			if before == 0 && w.sse.content > 0 {
				ttfc = time.Since(start)
			}
			if w.sse.err != kindOK {
				return w.sse.err, ttfc
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return w.sse.end(), ttfc
		case err != nil:
			if transportKind(err) == kindTimeout {
				return kindTimeout, ttfc
			}
			return kindCut, ttfc
		}
	}
}
