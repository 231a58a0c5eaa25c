package usage

import (
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestWindowAgainstSet applies shuffled, repeated seqs, out of order by
// less than WindowSize, and checks every answer against a plain set: each
// seq is fresh exactly once and nothing is given up.
func TestWindowAgainstSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 50_000
	seqs := make([]uint64, 0, 2*n)
	for s := uint64(1); s <= n; s++ {
		seqs = append(seqs, s)
		if r.IntN(10) == 0 {
			seqs = append(seqs, s) // a republish
		}
	}
	// Delay each seq by up to WindowSize/2 places.
	key := make(map[int]int, len(seqs))
	idx := make([]int, len(seqs))
	for i := range idx {
		idx[i], key[i] = i, i+r.IntN(WindowSize/2)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return key[a] - key[b] })
	shuffled := make([]uint64, len(seqs))
	for i, j := range idx {
		shuffled[i] = seqs[j]
	}
	seqs = shuffled
	var w Window
	seen := map[uint64]bool{}
	for _, s := range seqs {
		fresh, lost := w.Apply(s)
		if lost != 0 {
			t.Fatalf("seq %d: %d given up", s, lost)
		}
		if fresh == seen[s] {
			t.Fatalf("seq %d: fresh %v, seen before %v", s, fresh, seen[s])
		}
		seen[s] = true
		if w.Seen(s) != true {
			t.Fatalf("seq %d not seen after Apply", s)
		}
	}
	if w.Floor() != n || w.Missing() != 0 {
		t.Fatalf("floor %d missing %d, want %d and 0", w.Floor(), w.Missing(), n)
	}
}

// TestWindowGivesUpOnlyWhatNeverCame: a lost seq stays missing until the
// window must slide past it, is counted lost once, and is never applied
// afterwards (it would be applied late, out of its place).
func TestWindowGivesUpOnlyWhatNeverCame(t *testing.T) {
	var w Window
	for s := uint64(1); s <= 10; s++ {
		if s != 5 {
			w.Apply(s)
		}
	}
	if w.Floor() != 4 || w.Top() != 10 || w.Missing() != 1 {
		t.Fatalf("floor %d top %d missing %d", w.Floor(), w.Top(), w.Missing())
	}
	var lost uint64
	for s := uint64(11); s <= 4+WindowSize+1; s++ {
		_, l := w.Apply(s)
		lost += l
	}
	if lost != 1 || w.Missing() != 0 || w.Floor() != 4+WindowSize+1 {
		t.Fatalf("lost %d missing %d floor %d", lost, w.Missing(), w.Floor())
	}
	if fresh, _ := w.Apply(5); fresh {
		t.Fatal("a seq given up was applied late")
	}
	// A far jump gives up every seq it leaps over.
	if _, l := w.Apply(w.Floor() + 3*WindowSize); l != 3*WindowSize-1-(WindowSize-1) {
		t.Fatalf("jump gave up %d", l)
	}
}

func TestWindowBinaryRoundTrip(t *testing.T) {
	var w Window
	for _, s := range []uint64{1, 2, 3, 7, 9, 200, 4000} {
		w.Apply(s)
	}
	b, _ := w.MarshalBinary()
	var got Window
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got != w {
		t.Fatalf("round trip: %+v != %+v", got, w)
	}
	for _, bad := range [][]byte{nil, {1}, {1, 2}, append(b, 0)} {
		if (&Window{}).UnmarshalBinary(bad) == nil {
			t.Errorf("%x decoded", bad)
		}
	}
}

func TestDecodeMessage(t *testing.T) {
	ev := &usagev1.UsageEvent{EventId: "e1", Dept: "eng", CostNanoUsd: 42, PromptTokens: 7}
	legacy, _ := proto.Marshal(ev)
	var b usagev1.UsageBatch
	if err := DecodeMessage(legacy, &b); err != nil {
		t.Fatal(err)
	}
	if b.ProducerId != "" || len(b.Events) != 1 || !proto.Equal(b.Events[0], ev) {
		t.Fatalf("legacy message decoded as %v", &b)
	}
	batch, _ := proto.Marshal(&usagev1.UsageBatch{ProducerId: NewProducerID(), Seq: 3, Events: []*usagev1.UsageEvent{ev, ev}})
	if err := DecodeMessage(batch, &b); err != nil || b.Seq != 3 || len(b.Events) != 2 || !proto.Equal(b.Events[1], ev) {
		t.Fatalf("batch decoded as %v, %v", &b, err)
	}
	for name, m := range map[string]*usagev1.UsageBatch{
		"seq 0":       {ProducerId: "p1", Events: []*usagev1.UsageEvent{ev}},
		"no producer": {Seq: 2, Events: []*usagev1.UsageEvent{ev}},
		"bad id":      {ProducerId: "a.b", Seq: 1},
	} {
		data, _ := proto.Marshal(m)
		if err := DecodeMessage(data, &b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if DecodeMessage([]byte{0xff}, &b) == nil {
		t.Error("garbage decoded")
	}
	if id := NewProducerID(); !ValidProducerID(id) || len(id) != 16 {
		t.Errorf("producer id %q", id)
	}
}

// TestDedupUnapplied: the check readers make of a stream message when its
// history may have changed. Only a decodable batch whose producer's Window
// has not applied its seq is unapplied; a legacy event or an undecodable
// message cannot be judged, and asking adds no Window.
func TestDedupUnapplied(t *testing.T) {
	var d Dedup
	d.Apply("p1", 1)
	d.Apply("p1", 2)
	batch := func(p string, seq uint64) []byte {
		b, err := proto.Marshal(&usagev1.UsageBatch{ProducerId: p, Seq: seq, Events: []*usagev1.UsageEvent{{EventId: "e"}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	legacy, err := proto.Marshal(&usagev1.UsageEvent{EventId: "e", RequestId: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want bool
	}{
		{"applied", batch("p1", 2), false},
		{"not applied", batch("p1", 3), true},
		{"producer never seen", batch("p2", 1), true},
		{"legacy event", legacy, false},
		{"undecodable", []byte{0xff, 0xff, 0xff}, false},
	} {
		var b usagev1.UsageBatch
		if got := d.Unapplied(tc.data, &b); got != tc.want {
			t.Errorf("%s: Unapplied %v, want %v", tc.name, got, tc.want)
		}
	}
	if d.Len() != 1 {
		t.Errorf("Dedup knows %d producers after the checks, want 1", d.Len())
	}
}
