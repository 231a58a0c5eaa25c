package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// testProfile is a small CPU profile: main calls serve, which calls parse,
// which calls memmove; inlined is inlined into serve; walk calls itself;
// one location has no symbols.
func testProfile() *profile.Profile {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	serve, parse, memmove, inlined, walk, main := fn(1, "main.serve"), fn(2, "main.parse"), fn(3, "runtime.memmove"), fn(4, "main.inlined"), fn(5, "main.walk"), fn(6, "main.main")
	loc := func(id uint64, fns ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id, Address: 0x1000 + id}
		for _, f := range fns {
			l.Line = append(l.Line, profile.Line{Function: f})
		}
		return l
	}
	lMemmove, lParse, lServe, lInlined, lWalk, lMain := loc(1, memmove), loc(2, parse), loc(3, serve), loc(4, inlined, serve), loc(5, walk), loc(7, main)
	lBare := &profile.Location{ID: 6, Address: 0xabc}
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	sample := func(v int64, locs ...*profile.Location) *profile.Sample {
		return &profile.Sample{Value: []int64{v / ms(10), v}, Location: locs}
	}
	return &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        ms(10),
		TimeNanos:     time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano(),
		DurationNanos: int64(2 * time.Second),
		Mapping:       []*profile.Mapping{{ID: 1, Start: 0x1000, Limit: 0x2000, File: "/opt/build/bin/gateway"}},
		Function:      []*profile.Function{serve, parse, memmove, inlined, walk, main},
		Location:      []*profile.Location{lMemmove, lParse, lServe, lInlined, lWalk, lBare, lMain},
		Sample: []*profile.Sample{
			sample(ms(30), lMemmove, lParse, lServe),
			sample(ms(20), lParse, lServe),
			sample(ms(10), lInlined),
			sample(ms(10), lWalk, lWalk, lServe),
			sample(ms(1200), lServe, lMain),
			sample(ms(10), lBare),
		},
	}
}

func TestProfileTop(t *testing.T) {
	t.Run("top 4: flat, then cum; ties by flat, then by name", func(t *testing.T) {
		want := `File: gateway
Type: cpu
Time: 2026-12-01 12:00:00 UTC
Duration: 2s, Total samples = 1.28s (64.00%)

By flat time (go tool pprof -top):
Showing top 4 of 7 functions, accounting for 1.26s, 98.44% of 1.28s total
      flat  flat%   sum%        cum   cum%
     1.20s 93.75% 93.75%      1.27s 99.22%  main.serve
     0.03s  2.34% 96.09%      0.03s  2.34%  runtime.memmove
     0.02s  1.56% 97.66%      0.05s  3.91%  main.parse
     0.01s  0.78% 98.44%      0.01s  0.78%  0xabc

By cum time (go tool pprof -top -cum):
Showing top 4 of 7 functions, accounting for 1.25s, 97.66% of 1.28s total
      flat  flat%   sum%        cum   cum%
     1.20s 93.75% 93.75%      1.27s 99.22%  main.serve
         0     0% 93.75%      1.20s 93.75%  main.main
     0.02s  1.56% 95.31%      0.05s  3.91%  main.parse
     0.03s  2.34% 97.66%      0.03s  2.34%  runtime.memmove
`
		got, err := profileTop(testProfile(), 4)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("all: an inlined function has its own flat time, a recursive one counts once in cum", func(t *testing.T) {
		got, err := profileTop(testProfile(), 40)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{
			"Showing top 7 of 7 functions, accounting for 1.28s, 100.00% of 1.28s total",
			"     0.01s  0.78% 99.22%      0.01s  0.78%  main.inlined\n",
			"     0.01s  0.78% 100.00%      0.01s  0.78%  main.walk\n",
			"         0     0% 100.00%      1.20s 93.75%  main.main\n",
		} {
			if !strings.Contains(string(got), line) {
				t.Errorf("top lacks %q:\n%s", line, got)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		empty := testProfile()
		empty.Sample = nil
		untyped := testProfile()
		untyped.SampleType = nil
		for name, p := range map[string]*profile.Profile{"no samples": empty, "no sample types": untyped} {
			if _, err := profileTop(p, 10); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: error %v", name, err)
			}
		}
	})
}

func TestTopTableValue(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	tests := []struct {
		v, total int64
		unit     string
		want     string
	}{
		{ms(10), ms(990), "nanoseconds", "10ms"},
		{2500 * int64(time.Microsecond), ms(990), "nanoseconds", "2.5ms"},
		{ms(10), ms(1000), "nanoseconds", "0.01s"},
		{ms(12345), ms(20000), "nanoseconds", "12.35s"},
		{0, ms(20000), "nanoseconds", "0"},
		{42, 100, "count", "42"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := (topTable{unit: tt.unit, total: tt.total}).value(tt.v); got != tt.want {
				t.Errorf("value(%d) of %d %s = %q, want %q", tt.v, tt.total, tt.unit, got, tt.want)
			}
		})
	}
}

// TestProfileTopFile reads a profile as the gateway's pprof sends it
// (gzipped protobuf) and writes and removes the top in a results directory.
func TestProfileTopFile(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "run.pprof")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := testProfile().Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := profileTopFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := profileTop(testProfile(), profileTopN)
	if string(got) != string(want) {
		t.Errorf("from the file:\n%s\nwant\n%s", got, want)
	}
	if _, err := profileTopFile(filepath.Join(dir, "missing.pprof")); err == nil {
		t.Error("no error for a missing profile")
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.pprof"), []byte("not a profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := profileTopFile(filepath.Join(dir, "junk.pprof")); err == nil {
		t.Error("no error for a file that is not a profile")
	}

	pr := &Profile{Scenario: "nonstream-c32", File: profileFile("nonstream-c32")}
	top := filepath.Join(dir, "profile-nonstream-c32.txt")
	if err := writeProfileTop(pr, got, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(top); err != nil || string(b) != string(got) {
		t.Fatalf("written top: %q, %v", b, err)
	}
	// A run whose profile failed removes the earlier top.
	if err := writeProfileTop(&Profile{Scenario: "nonstream-c32", Error: "boom"}, nil, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(top); !os.IsNotExist(err) {
		t.Errorf("stale top still there: %v", err)
	}
	if err := writeProfileTop(nil, nil, dir); err != nil {
		t.Errorf("no profile: %v", err)
	}
}

func TestProfileIntro(t *testing.T) {
	pr := &Profile{Scenario: "nonstream-c32", Title: "Non-stream, instant upstream, 32 clients", WindowS: 5}
	got := profileIntro(pr, "abc1234")
	for _, s := range []string{"nonstream-c32 (Non-stream, instant upstream, 32 clients), commit abc1234", "extra 5s run", "after its measured repetitions", "top 40 functions"} {
		if !strings.Contains(got, s) {
			t.Errorf("intro lacks %q:\n%s", s, got)
		}
	}
}
