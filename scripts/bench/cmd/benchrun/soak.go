package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Soak answers: about 1.2 s each, 60 content chunks 20 ms apart.
const (
	soakChunks     = 60
	soakChunkDelay = 20 * time.Millisecond
)

// Soak is the result of `make bench-soak`.
type Soak struct {
	Started   time.Time `json:"started"`
	Target    string    `json:"target"`
	Rate      int       `json:"rate"`
	DurationS float64   `json:"duration_s"`
	Run       Run       `json:"run"`
	// Others are the soak's results on further targets, when asked for.
	Others  map[string]Run `json:"others,omitempty"`
	Machine Machine        `json:"machine"`
}

// soakDescription says what the soak does.
func soakDescription() string {
	return fmt.Sprintf("200 streams/s (open loop), each answer %d chunks %s apart (about 1.2 s), for 3 minutes", soakChunks, soakChunkDelay)
}

// runSoak runs the soak on the configured targets and writes soak.json;
// BENCHMARKS.md is re-rendered when latest.json exists.
func runSoak(ctx context.Context, o *options, out io.Writer) error {
	fmt.Fprintf(out, "soak: %d streams/s for %s on %s (planned about %s)\n", o.soakRate, o.soakDur, strings.Join(o.soakTargets, ", "),
		(time.Duration(len(o.soakTargets))*(o.soakDur+10*time.Second) + 45*time.Second).Round(10*time.Second))
	e, err := prepare(ctx, o, out)
	defer e.cleanup(out)
	if err != nil {
		return err
	}
	s := &suite{st: e.st, rawDir: e.rawDir, reps: 1, out: out}
	p := plan{
		name: "soak", group: "soak", title: "soak",
		args: []string{"-rate", itoa(o.soakRate), "-stream", "-chunks", itoa(soakChunks), "-chunk-delay", soakChunkDelay.String(),
			"-prompt-words", "200", "-max-inflight", "4000"},
		warmup: 5 * time.Second, dur: o.soakDur,
	}
	soak := &Soak{Started: time.Now(), Rate: o.soakRate, DurationS: o.soakDur.Seconds(), Machine: e.machine}
	for i, target := range o.soakTargets {
		fmt.Fprintf(out, "soak on %s\n", target)
		run, err := s.one(ctx, p, target, 1)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s\n", runLine(p, run))
		if i == 0 {
			soak.Target, soak.Run = target, run
			continue
		}
		if soak.Others == nil {
			soak.Others = map[string]Run{}
		}
		soak.Others[target] = run
	}
	e.cleanup(out)
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", o.outDir, err)
	}
	if err := writeJSON(filepath.Join(o.outDir, "soak.json"), soak); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(o.outDir, "latest.json")); err == nil {
		return renderFiles(o, out)
	}
	return nil
}
