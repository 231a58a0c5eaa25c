package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// claudeCodeVersion is the Claude Code release scripts/deps.sh installs.
const claudeCodeVersion = "2.1.328"

// TestClaudeCodeCLI runs the Claude Code CLI, pinned, headless, against a
// gateway on the dev config, on a model served natively (the mock as an
// anthropic provider) and on models served by translation (issue #46):
// mock-gpt (kind mock, the OpenAI format) and the mock as a gemini and a
// bedrock provider. A plain prompt, and one that names the Read tool, so
// that the mock calls it, the CLI runs it and sends its result back, and
// the mock's final answer quotes it. Each run must end without error and every
// request it made must be billed with the provider's counts, and the
// department's total (the budget consumer's) must be their sum. Without the
// CLI (scripts/deps.sh installs it) the test skips; with CI=true it fails.
func TestClaudeCodeCLI(t *testing.T) {
	bin := agentCLI(t, "Claude Code "+claudeCodeVersion, "claude-code-"+claudeCodeVersion, "claude")
	url, tok, js := startDevWith(t, func(cfg *config.Config, mockURL string) {
		base := strings.TrimSuffix(mockURL, "/v1")
		cfg.Providers = append(cfg.Providers,
			config.Provider{Name: "ant", Kind: config.KindAnthropic, BaseURL: base, APIKey: "mock"},
			config.Provider{Name: "gem", Kind: config.KindGemini, BaseURL: base, APIKey: "mock"},
			config.Provider{Name: "aws", Kind: config.KindBedrock, BaseURL: base, Region: "us-east-1", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "mock"})
		cfg.Models = append(cfg.Models,
			config.Model{Name: "claude-mock", Type: "chat", Targets: []config.Target{{Provider: "ant"}}},
			config.Model{Name: "gemini-mock", Type: "chat", Targets: []config.Target{{Provider: "gem"}}},
			config.Model{Name: "bedrock-mock", Type: "chat", Targets: []config.Target{{Provider: "aws"}}})
		if cfg.Prices == nil {
			cfg.Prices = map[string]config.Price{}
		}
		cfg.Prices["claude-mock"] = config.Price{Input: "3.00", Output: "15.00"} // the native model is billed at a price
		cfg.ApplyDefaults()
	})
	for _, tt := range []struct{ name, model, prompt, want string }{
		{"anthropic kind (native) plain", "claude-mock", "Say hello.", ""},
		{"anthropic kind (native) tool", "claude-mock", "Use Read to open the file notes.txt.", "(tool result:"},
		{"openai kind plain", "mock-gpt", "Say hello.", ""},
		{"openai kind tool", "mock-gpt", "Use Read to open the file notes.txt.", "(tool result:"},
		{"gemini kind tool", "gemini-mock", "Use Read to open the file notes.txt.", "(tool result:"},
		{"bedrock kind tool", "bedrock-mock", "Use Read to open the file notes.txt.", "(tool result:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home, work := t.TempDir(), t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-p", tt.prompt, "--model", tt.model, "--output-format", "json")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "ANTHROPIC_BASE_URL=" + url,
				"ANTHROPIC_AUTH_TOKEN=" + tok, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
				"ANTHROPIC_DEFAULT_HAIKU_MODEL=" + tt.model}
			out, err := cmd.Output()
			var res struct {
				IsError bool   `json:"is_error"`
				Result  string `json:"result"`
				Turns   int    `json:"num_turns"`
			}
			if jerr := json.Unmarshal(out, &res); err != nil || jerr != nil || res.IsError || res.Result == "" {
				var stderr []byte
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					stderr = ee.Stderr
				}
				t.Fatalf("claude: %v %v\nstdout: %s\nstderr: %s", err, jerr, out, stderr)
			}
			if !strings.Contains(res.Result, tt.want) {
				t.Errorf("result %q (%d turns), want it to contain %q", res.Result, res.Turns, tt.want)
			}
		})
	}
	checkDeptTotal(t, js, "dev", checkBilled(t, js))
}
