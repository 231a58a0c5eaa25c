package usage

import (
	"regexp"
	"testing"
	"time"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewEventID(t *testing.T) {
	t0 := time.UnixMilli(1796000000000)
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 10000; i++ {
		id := NewEventID(t0.Add(time.Duration(i) * time.Millisecond))
		if !uuidV7.MatchString(id) {
			t.Fatalf("%q is not a UUIDv7", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		if id[:13] < prev[:min(13, len(prev))] {
			t.Fatalf("ids not time-ordered: %q after %q", id, prev)
		}
		prev = id
	}
	// 1796000000000 ms = 0x01a2 29f1 2800: the first 48 bits spell it.
	if got := NewEventID(t0)[:13]; got != "01a229f1-2800" {
		t.Errorf("timestamp prefix %s, want 01a229f1-2800", got)
	}
}

func BenchmarkNewEventID(b *testing.B) {
	b.ReportAllocs()
	now := time.Now()
	for i := 0; i < b.N; i++ {
		_ = NewEventID(now)
	}
}
