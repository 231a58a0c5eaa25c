package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/replay"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

func TestPricesImport(t *testing.T) {
	litellm := "../../pkg/pricing/testdata/litellm_model_prices.json"
	modelsDev := "../../pkg/pricing/testdata/models_dev_api.json"
	out := filepath.Join(t.TempDir(), "prices.yaml")
	env := map[string]string{}

	t.Run("diff only", func(t *testing.T) {
		code, stdout, stderr := run1(t, env, "prices", "import", litellm, "--format", "litellm", "--provider", "anthropic", "--keep")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{
			"against the embedded table (version " + pricing.Default().Version + ")",
			`~ claude-sonnet-4-5 {input: "3.00", output: "15.00", cached_input: "0.30"} -> {input: "3.00", output: "15.00", cached_input: "0.30", cache_write: "3.75", long: {above_prompt_tokens: 200000, input: "6.00", output: "22.50", cached_input: "0.60", cache_write: "7.50"}}`,
			"0 added, 2 changed, 0 removed",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, stdout)
			}
		}
	})
	t.Run("write", func(t *testing.T) {
		code, stdout, stderr := run1(t, env, "prices", "import", litellm, "--format", "litellm", "--version", "litellm-test-1", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout, "+ gpt-image-1 {") || !strings.Contains(stdout, "- mock-gpt {") ||
			!strings.Contains(stdout, "wrote "+out+" (version litellm-test-1, 12 models)") {
			t.Errorf("output:\n%s", stdout)
		}
		// The diff comes before the write.
		if strings.Index(stdout, "removed;") > strings.Index(stdout, "wrote ") {
			t.Errorf("wrote before showing the diff:\n%s", stdout)
		}
	})
	t.Run("against the written table", func(t *testing.T) {
		code, stdout, stderr := run1(t, env, "prices", "import", modelsDev, "--format", "models.dev", "--provider", "openai,anthropic", "--out", out, "--version", "md-1", "--show-skipped")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{
			"against " + out + " (version litellm-test-1)",
			"+ gpt-5-mini {",
			"- gemini-2.5-pro {",
			// models.dev prices the embedding and the two Claudes as LiteLLM
			// does, and gpt-4o and gpt-5 without their service tiers.
			`~ gpt-5 {input: "1.25", output: "10.00", cached_input: "0.125", tiers: {flex: {input: "0.625", output: "5.00", cached_input: "0.0625"}, priority: {input: "2.50", output: "20.00"}}} -> {input: "1.25", output: "10.00", cached_input: "0.125"}`,
			"1 added, 2 changed, 7 removed",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, stdout)
			}
		}
	})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no file", []string{"--format", "litellm"}},
		{"no format", []string{litellm}},
		{"bad format", []string{litellm, "--format", "csv"}},
		{"two files", []string{litellm, modelsDev, "--format", "litellm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, _ := run1(t, env, append([]string{"prices", "import"}, tc.args...)...); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
		})
	}
	t.Run("models.dev without providers", func(t *testing.T) {
		if code, _, _ := run1(t, env, "prices", "import", modelsDev, "--format", "models.dev"); code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
	})
}

// TestImportedTableReprices: the table `prices import` writes is what
// `tollctl replay --reprice` reads, long-context tier included.
func TestImportedTableReprices(t *testing.T) {
	out := filepath.Join(t.TempDir(), "prices.yaml")
	if code, _, stderr := run1(t, nil, "prices", "import", "../../pkg/pricing/testdata/litellm_model_prices.json",
		"--format", "litellm", "--version", "litellm-test-2", "--out", out); code != 0 {
		t.Fatal(stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := pricing.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		prompt uint64
		want   int64
	}{
		{"below 200k", 100_000, 100_000*1_250 + 1_000*10_000},                // gemini-2.5-pro $1.25 / $10 per million
		{"above 200k: the long tier", 250_000, 250_000*2_500 + 1_000*15_000}, // $2.50 / $15
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := &usagev1.UsageEvent{ServedModel: "gemini-2.5-pro", PromptTokens: tc.prompt, CompletionTokens: 1_000, Timestamp: time.Now().UnixNano()}
			if !replay.Reprice(ev, tab) {
				t.Fatal("no price")
			}
			if ev.CostNanoUsd != tc.want || ev.PricingVersion != "litellm-test-2" {
				t.Errorf("cost %d version %s, want %d litellm-test-2", ev.CostNanoUsd, ev.PricingVersion, tc.want)
			}
		})
	}
}
