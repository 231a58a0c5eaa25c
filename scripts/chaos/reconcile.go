package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// reconcileReport is the part of `tollctl reconcile --json` the rig reads.
type reconcileReport struct {
	OK      bool `json:"ok"`
	Sources []struct {
		Name     string `json:"name"`
		Requests int64  `json:"requests"`
		Cost     int64  `json:"cost_nano_usd"`
	} `json:"sources"`
	Differences []string `json:"differences"`
}

// hasReconcile reports whether the built tollctl has the reconcile command.
func (r *rig) hasReconcile(ctx context.Context) bool {
	out, _ := exec.CommandContext(ctx, r.binPath("tollctl"), "help").CombinedOutput()
	return bytes.Contains(out, []byte("reconcile"))
}

// resetMock zeroes mockllm's counters, so that its requests are the
// scenario's own when tollctl reconcile compares them.
func (r *rig) resetMock(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.mockAddr+"/stats/reset", nil)
	if err != nil {
		return fmt.Errorf("reset mock stats: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reset mock stats: %w", err)
	}
	resp.Body.Close()
	return nil
}

// mockLedger reads mockllm's ledger (what it served since the scenario
// began).
func (r *rig) mockLedger(ctx context.Context) (mockllm.Ledger, error) {
	var l mockllm.Ledger
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.mockAddr+"/ledger", nil)
	if err != nil {
		return l, fmt.Errorf("read mock ledger: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return l, fmt.Errorf("read mock ledger: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return l, fmt.Errorf("read mock ledger: %w", err)
	}
	return l, nil
}

// reconcile runs `tollctl reconcile` over the scenario's time window (the
// mock's ledger was reset when the scenario began) and stores its verdict
// in res.
func (r *rig) reconcile(ctx context.Context, res *result) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.binPath("tollctl"), "reconcile", "--nats", r.natsURLs(),
		"--clickhouse", r.ch.Addr(), "--mock", "http://"+r.mockAddr, "--config", r.config,
		"--since", res.since.Add(-time.Second).Format(time.RFC3339), "--until", res.until.Add(time.Second).Format(time.RFC3339),
		"--wait", "15s", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep reconcileReport
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		res.reconcile = fmt.Sprintf("not run (%v: %s)", errors.Join(err, jerr), strings.TrimSpace(stderr.String()))
		res.reconcileDiffs = []string{res.reconcile}
		return
	}
	if rep.OK {
		res.reconcile = "ok"
		return
	}
	res.reconcile = "differ: " + strings.Join(rep.Differences, "; ")
	res.reconcileDiffs = rep.Differences
}
