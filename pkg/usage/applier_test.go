package usage

import (
	"testing"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestApplier feeds messages in stream order and checks each verdict: a
// batch counts at its first appearance only, legacy messages are left to
// the caller, and a restored checkpoint covers what it says it covers.
func TestApplier(t *testing.T) {
	type msg struct {
		stream   uint64
		producer string
		seq      uint64
		want     Verdict
		lost     uint64
	}
	tests := []struct {
		name    string
		restore func(a *Applier)
		msgs    []msg
		missing uint64
	}{
		{
			name: "republished and out of order",
			msgs: []msg{
				{1, "a", 1, Fresh, 0}, {2, "b", 1, Fresh, 0}, {3, "", 0, Legacy, 0}, {4, "a", 3, Fresh, 0},
				{5, "a", 1, Repeat, 0}, {6, "a", 2, Fresh, 0}, {7, "b", 1, Repeat, 0}, {8, "", 0, Legacy, 0},
				{9, "b", 3, Fresh, 0},
			},
			missing: 1, // b:2
		},
		{
			name: "a gap given up",
			msgs: []msg{
				{1, "a", 1, Fresh, 0}, {2, "a", 3, Fresh, 0}, {3, "a", 2 + WindowSize, Fresh, 1}, {4, "a", 2, Repeat, 0},
			},
			missing: WindowSize - 2, // 4 .. WindowSize+1
		},
		{
			name: "restored checkpoint",
			restore: func(a *Applier) {
				var w Window
				w.Apply(1)
				w.Apply(2)
				a.Restore("a", &w, 10)
			},
			msgs: []msg{
				{9, "a", 3, Covered, 0}, // counted before the checkpoint was taken
				{10, "a", 2, Covered, 0},
				{11, "a", 2, Repeat, 0},
				{12, "a", 4, Fresh, 0},
				{13, "b", 1, Fresh, 0},
			},
			missing: 1, // a:3 as the restored Window knows it
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Applier
			if tt.restore != nil {
				tt.restore(&a)
			}
			for _, m := range tt.msgs {
				b := &usagev1.UsageBatch{ProducerId: m.producer, Seq: m.seq}
				if v, lost := a.Apply(m.stream, b); v != m.want || lost != m.lost {
					t.Fatalf("stream seq %d (%s:%d): verdict %d, lost %d; want %d, %d", m.stream, m.producer, m.seq, v, lost, m.want, m.lost)
				}
			}
			if got := a.Missing(); got != tt.missing {
				t.Errorf("missing %d, want %d", got, tt.missing)
			}
			a.Reset()
			if a.Producers() != 0 || a.Missing() != 0 {
				t.Error("Reset kept producers")
			}
		})
	}
}
