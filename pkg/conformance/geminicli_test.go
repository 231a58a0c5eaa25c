package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/config"
)

// geminiCLIVersion is the Gemini CLI release scripts/deps.sh installs.
const geminiCLIVersion = "0.61.0"

// geminiSettings is the CLI's settings.json: API-key auth, no telemetry,
// usage statistics, update checks or IDE integration.
const geminiSettings = `{"security":{"auth":{"selectedType":"gemini-api-key"}},` +
	`"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},` +
	`"general":{"disableAutoUpdate":true,"disableUpdateNag":true},"ide":{"enabled":false}}`

// TestGeminiCLI runs Gemini CLI, pinned, headless, against a gateway on
// the dev config (issue #46): on gemini-mock, served natively by a gemini
// provider (the mock), and on mock-gpt, served by translation. A plain
// prompt, and one that names the read_file tool, so that the mock calls
// it, the CLI runs it and sends its result back, and the mock's final
// answer quotes it. Each run must end without error; every request it
// made must be billed with the provider's counts, and the department's
// total (the budget consumer's) must be the sum of its events. Without
// the CLI (scripts/deps.sh installs it) the test skips; with CI=true it
// fails.
func TestGeminiCLI(t *testing.T) {
	bin := agentCLI(t, "Gemini CLI "+geminiCLIVersion, "gemini-cli-"+geminiCLIVersion, "gemini")
	url, tok, js := startDevWith(t, func(cfg *config.Config, mockURL string) {
		base := strings.TrimSuffix(mockURL, "/v1")
		cfg.Providers = append(cfg.Providers, config.Provider{Name: "gem", Kind: config.KindGemini, BaseURL: base, APIKey: "mock"})
		cfg.Models = append(cfg.Models, config.Model{Name: "gemini-mock", Type: "chat", Targets: []config.Target{{Provider: "gem"}}})
		if cfg.Prices == nil {
			cfg.Prices = map[string]config.Price{}
		}
		cfg.Prices["gemini-mock"] = config.Price{Input: "0.30", Output: "2.50"} // billed like mock-gpt, at a price
		cfg.ApplyDefaults()
	})
	for _, tt := range []struct{ name, model, prompt, want string }{
		{"native plain", "gemini-mock", "Say hello.", ""},
		{"native tool", "gemini-mock", "Use read_file to open the file notes.txt.", "(tool result:"},
		{"translated plain", "mock-gpt", "Say hello.", ""},
		{"translated tool", "mock-gpt", "Use read_file to open the file notes.txt.", "(tool result:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home, work := t.TempDir(), t.TempDir()
			if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(geminiSettings), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("the notes\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-p", tt.prompt, "-m", tt.model, "--output-format", "json")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GEMINI_API_KEY=" + tok,
				"GOOGLE_GEMINI_BASE_URL=" + url, "GEMINI_CLI_TRUST_WORKSPACE=true", "NO_BROWSER=true"}
			out, err := cmd.Output()
			var res struct {
				Response string          `json:"response"`
				Error    json.RawMessage `json:"error"`
			}
			if jerr := json.Unmarshal(out, &res); err != nil || jerr != nil || len(res.Error) > 0 && string(res.Error) != "null" || res.Response == "" {
				var stderr []byte
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					stderr = ee.Stderr
				}
				t.Fatalf("gemini: %v %v\nstdout: %s\nstderr: %s", err, jerr, out, stderr)
			}
			if !strings.Contains(res.Response, tt.want) {
				t.Errorf("response %q, want it to contain %q", res.Response, tt.want)
			}
		})
	}
	checkGeminiBilled(t, js, "dev")
}

// checkGeminiBilled checks the usage events of the Gemini CLI runs: each
// a success on a Gemini endpoint with the provider's token counts (a
// token count, if the CLI made one, is free), and the department's total
// equal to their sum.
func checkGeminiBilled(t *testing.T, js jetstream.JetStream, dept string) {
	t.Helper()
	evs := usageEvents(t, js)
	var generate int
	for _, ev := range evs {
		count := strings.HasSuffix(ev.Endpoint, ":countTokens")
		if !count {
			generate++
		}
		if ev.StatusCode != 200 || !strings.HasPrefix(ev.Endpoint, "/v1beta/models/{model}:") ||
			!count && (ev.Estimated || ev.PromptTokens == 0 || ev.CompletionTokens == 0 || ev.CostNanoUsd == 0) {
			t.Errorf("usage event %s %s: status %d estimated %v tokens %d/%d cost %d", ev.Endpoint, ev.RequestId,
				ev.StatusCode, ev.Estimated, ev.PromptTokens, ev.CompletionTokens, ev.CostNanoUsd)
		}
	}
	if generate < 6 { // 2 plain prompts, 2 tool prompts of 2 requests each
		t.Fatalf("%d generate requests billed, want at least 6", generate)
	}
	checkDeptTotal(t, js, dept, evs)
}
