package respcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// clock is a settable clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// openCacheB opens a running cache with default options for a benchmark.
func openCacheB(b *testing.B) (*Cache, jetstream.JetStream, *clock) {
	return openCache(b, Options{}, true)
}

// openCache opens a cache on an embedded NATS server; run starts Run until
// the test ends.
func openCache(t testing.TB, o Options, run bool) (*Cache, jetstream.JetStream, *clock) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	if o.TTL == 0 {
		o.TTL = time.Hour
	}
	o.Now = clk.Now
	c, err := Open(context.Background(), js, o)
	if err != nil {
		t.Fatal(err)
	}
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	return c, js, clk
}

// waitStored waits until n entries were written.
func waitStored(t *testing.T, c *Cache, n int64) {
	t.Helper()
	testkit.Wait(t, 5*time.Second, fmt.Sprintf("%d stored entries", n), func() bool { return c.Stats().Stored >= n })
}

func key(t *testing.T, body string, s Scope) Key {
	t.Helper()
	k, err := NewKey("/chat/completions", []byte(body), s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRoundTrip(t *testing.T) {
	c, _, _ := openCache(t, Options{}, true)
	ctx := context.Background()
	events := [][]byte{
		[]byte("data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"),
		[]byte("data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n"),
		[]byte("data: [DONE]\n\n"),
	}
	tests := []struct {
		name  string
		body  string
		entry func() *Entry
	}{
		{name: "non-stream", body: `{"model":"m","messages":[]}`, entry: func() *Entry {
			return &Entry{Body: []byte(`{"id":"c1","choices":[]}`), Model: "gpt-4o-2024", Provider: "openai",
				Usage: Usage{Prompt: 10, Completion: 5, Cached: 2, Reasoning: 1}}
		}},
		{name: "stream", body: `{"model":"m","messages":[],"stream":true}`, entry: func() *Entry {
			e := &Entry{Model: "claude", Provider: "anthropic", Usage: Usage{Prompt: 3, Completion: 2}}
			for _, ev := range events {
				buf := append([]byte(nil), ev...)
				e.AppendEvent(buf)
				clear(buf) // the entry keeps its own copy
			}
			return e
		}},
		{name: "empty stream", body: `{"model":"e","stream":true}`, entry: func() *Entry {
			return &Entry{Stream: true}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := key(t, tt.body, Scope{Dept: "d"})
			if _, err := c.Get(ctx, k); !errors.Is(err, ErrMiss) {
				t.Fatalf("Get before Put: %v, want ErrMiss", err)
			}
			want := tt.entry()
			if !c.Put(k, time.Minute, want) {
				t.Fatal("Put refused")
			}
			waitStored(t, c, int64(i+1))
			got, err := c.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stream != want.Stream || !bytes.Equal(got.Body, want.Body) || got.Model != want.Model ||
				got.Provider != want.Provider || got.Usage != want.Usage {
				t.Fatalf("got %+v, want %+v", got, want)
			}
			if !got.Expires.Equal(got.Created.Add(time.Minute)) || !got.Created.Equal(want.Created) {
				t.Fatalf("created %v expires %v, want %v and a minute later", got.Created, got.Expires, want.Created)
			}
			if want.Stream {
				if gotEv, wantEv := slices.Collect(got.Events()), slices.Collect(want.Events()); !slices.EqualFunc(gotEv, wantEv, bytes.Equal) {
					t.Fatalf("events %q, want %q", gotEv, wantEv)
				}
				if tt.name == "stream" && !slices.EqualFunc(slices.Collect(got.Events()), events, bytes.Equal) {
					t.Fatalf("events %q, want %q", slices.Collect(got.Events()), events)
				}
			}
		})
	}
	if s := c.Stats(); s.Hits != 3 || s.Misses != 3 || s.Queued != 3 || s.Stored != 3 {
		t.Errorf("stats %+v", s)
	}
}

func TestTenantIsolation(t *testing.T) {
	c, _, _ := openCache(t, Options{}, true)
	ctx := context.Background()
	const body = `{"model":"m","messages":[{"role":"user","content":"secret plan"}]}`
	c.Put(key(t, body, Scope{Dept: "eng", Team: "a"}), time.Minute, &Entry{Body: []byte("eng answer")})
	c.Put(key(t, body, Scope{Shared: true}), time.Minute, &Entry{Body: []byte("shared answer")})
	waitStored(t, c, 2)
	tests := []struct {
		name  string
		scope Scope
		want  string // "" for a miss
	}{
		{"same scope hits", Scope{Dept: "eng", Team: "a"}, "eng answer"},
		{"other team misses", Scope{Dept: "eng", Team: "b"}, ""},
		{"other dept misses", Scope{Dept: "sales", Team: "a"}, ""},
		{"no scope misses", Scope{}, ""},
		{"shared hits the shared entry", Scope{Shared: true, Dept: "sales"}, "shared answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := c.Get(ctx, key(t, body, tt.scope))
			switch {
			case tt.want == "" && !errors.Is(err, ErrMiss):
				t.Fatalf("Get: %v, want a miss", err)
			case tt.want != "" && (err != nil || string(e.Body) != tt.want):
				t.Fatalf("Get: %v, %v; want %q", e, err, tt.want)
			}
		})
	}
}

func TestEntryExpiry(t *testing.T) {
	c, _, clk := openCache(t, Options{}, true)
	ctx := context.Background()
	k := key(t, `{"model":"m"}`, Scope{})
	c.Put(k, time.Minute, &Entry{Body: []byte("x")})
	waitStored(t, c, 1)
	clk.Add(59 * time.Second)
	if _, err := c.Get(ctx, k); err != nil {
		t.Fatalf("within ttl: %v", err)
	}
	clk.Add(time.Second)
	if _, err := c.Get(ctx, k); !errors.Is(err, ErrMiss) {
		t.Fatalf("at ttl: %v, want ErrMiss", err)
	}
	if s := c.Stats(); s.Expired != 1 {
		t.Fatalf("stats %+v: want 1 expired", s)
	}
}

func TestBucket(t *testing.T) {
	c, js, _ := openCache(t, Options{TTL: 90 * time.Minute, Memory: true}, false)
	kv, err := js.KeyValue(context.Background(), DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 90*time.Minute || st.History() != 1 {
		t.Fatalf("bucket ttl %v history %d, want 1h30m and 1", st.TTL(), st.History())
	}
	// A corrupt value reads as a miss.
	k := key(t, `{"model":"m"}`, Scope{})
	if _, err := kv.Put(context.Background(), k.String(), []byte("not an entry")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), k); !errors.Is(err, ErrMiss) {
		t.Fatalf("corrupt entry: %v, want ErrMiss", err)
	}
	if s := c.Stats(); s.Corrupt != 1 {
		t.Fatalf("stats %+v: want 1 corrupt", s)
	}
}

func TestBucketTTLOfModels(t *testing.T) {
	models := []config.Model{{Name: "a"}, {Name: "b", Cache: config.ModelCache{TTL: time.Hour}}, {Name: "c", Cache: config.ModelCache{TTL: time.Minute}}}
	if got := BucketTTL(models); got != time.Hour {
		t.Fatalf("BucketTTL = %v, want 1h", got)
	}
	if got := BucketTTL(models[:1]); got != 0 {
		t.Fatalf("BucketTTL without caching = %v, want 0", got)
	}
}

func TestPutNeverBlocks(t *testing.T) {
	c, _, _ := openCache(t, Options{Queue: 2, MaxEntryBytes: 100}, false) // Run not started
	k := key(t, `{"model":"m"}`, Scope{})
	tests := []struct {
		name string
		e    *Entry
		want bool
	}{
		{"first", &Entry{Body: []byte("a")}, true},
		{"second", &Entry{Body: []byte("b")}, true},
		{"queue full", &Entry{Body: []byte("c")}, false},
		{"too large", &Entry{Body: make([]byte, 200)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Put(k, time.Minute, tt.e); got != tt.want {
				t.Fatalf("Put = %v, want %v", got, tt.want)
			}
		})
	}
	if s := c.Stats(); s.Queued != 2 || s.Dropped != 1 || s.TooLarge != 1 {
		t.Fatalf("stats %+v: want 2 queued, 1 dropped, 1 too large", s)
	}
	// Stopping Run counts what is still queued as dropped.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Stored+s.Dropped != 3 {
		t.Fatalf("stats %+v: every queued entry is stored or dropped", s)
	}
}

func TestPutFailures(t *testing.T) {
	c, js, _ := openCache(t, Options{}, true)
	if err := js.DeleteKeyValue(context.Background(), DefaultBucket); err != nil {
		t.Fatal(err)
	}
	c.Put(key(t, `{"model":"m"}`, Scope{}), time.Minute, &Entry{Body: []byte("x")})
	testkit.Wait(t, 10*time.Second, "a failed write", func() bool { return c.Stats().Failed > 0 })
	if _, err := c.Get(context.Background(), key(t, `{"model":"m"}`, Scope{})); err == nil || errors.Is(err, ErrMiss) {
		t.Fatalf("Get on a deleted bucket: %v, want an error other than a miss", err)
	}
}

func TestOpenNeedsTTL(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, _ := jetstream.New(nc)
	if _, err := Open(context.Background(), js, Options{}); err == nil {
		t.Fatal("Open without a ttl succeeded")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	e := &Entry{Model: "m", Provider: "p"}
	e.AppendEvent([]byte("data: x\n\n"))
	e.AppendEvent([]byte("data: y\n\n"))
	good := appendEntry(nil, e)
	if _, err := decodeEntry(good); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		if _, err := decodeEntry(good[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: decoded", n)
		}
	}
	if _, err := decodeEntry(append(good, 0)); err == nil {
		t.Fatal("trailing byte: decoded")
	}
}
