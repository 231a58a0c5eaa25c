package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/config"
)

// codexVersion is the Codex CLI release scripts/deps.sh installs.
const codexVersion = "0.169.0"

// codexConfig is the CODEX_HOME/config.toml of the test: the gateway as a
// custom model provider speaking the Responses API, the token in
// TOLLGATE_TOKEN, no retries (a failure must show), and web search off
// (a built-in tool that only OpenAI's servers run; the gateway refuses it
// on a model served by translation: docs/responses.md).
const codexConfig = `web_search = "disabled"
model_provider = "tollgate"

[model_providers.tollgate]
name = "Tollgate"
base_url = "%s/v1"
env_key = "TOLLGATE_TOKEN"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`

// TestCodexCLI runs the Codex CLI, pinned, headless (codex exec), against
// a gateway on the dev config (issue #46): on mock-gpt, served natively
// (the mock speaks the Responses API), and on the mock as an anthropic, a
// gemini and a bedrock provider, served by translation. A plain prompt,
// and one that names exec_command, Codex's shell tool, so that the mock
// calls it with arguments made from its schema, Codex handles the call and
// sends its output back (the mock's arguments are words, not a command
// Codex can run: the output is Codex's own account of that), and the
// mock's final answer quotes it. Each run must end without error; every request it made
// must have its usage event, with the provider's counts and a cost, and
// the department's total must equal the sum of those costs. Without the
// CLI (scripts/deps.sh installs it) the test skips; with CI=true it fails.
func TestCodexCLI(t *testing.T) {
	bin := agentCLI(t, "Codex CLI "+codexVersion, "codex-"+codexVersion, "codex")
	url, tok, js := startDevWith(t, func(cfg *config.Config, mockURL string) {
		base := strings.TrimSuffix(mockURL, "/v1")
		cfg.Providers = append(cfg.Providers,
			config.Provider{Name: "claude", Kind: config.KindAnthropic, BaseURL: base, APIKey: "mock"},
			config.Provider{Name: "gem", Kind: config.KindGemini, BaseURL: base, APIKey: "mock"},
			config.Provider{Name: "aws", Kind: config.KindBedrock, BaseURL: base, Region: "us-east-1", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "mock"})
		// Each serves the upstream model mock-gpt, which the price table
		// prices, so that every request has a cost.
		cfg.Models = append(cfg.Models,
			config.Model{Name: "claude-mock", Type: "chat", Targets: []config.Target{{Provider: "claude", Model: "mock-gpt"}}},
			config.Model{Name: "gemini-mock", Type: "chat", Targets: []config.Target{{Provider: "gem", Model: "mock-gpt"}}},
			config.Model{Name: "bedrock-mock", Type: "chat", Targets: []config.Target{{Provider: "aws", Model: "mock-gpt"}}})
		cfg.ApplyDefaults()
	})
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "config.toml"), fmt.Appendf(nil, codexConfig, url), 0o600); err != nil {
		t.Fatal(err)
	}
	const toolPrompt = "Use exec_command to list the files here."
	for _, tt := range []struct{ name, model, prompt, want string }{
		{"native plain", "mock-gpt", "Say hello.", ""},
		{"native tool", "mock-gpt", toolPrompt, "(tool result:"},
		{"anthropic kind plain", "claude-mock", "Say hello.", ""},
		{"anthropic kind tool", "claude-mock", toolPrompt, "(tool result:"},
		{"gemini kind tool", "gemini-mock", toolPrompt, "(tool result:"},
		{"bedrock kind tool", "bedrock-mock", toolPrompt, "(tool result:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "exec", "--skip-git-repo-check", "--json", "-m", tt.model, tt.prompt)
			cmd.Dir = work
			cmd.Stdin = bytes.NewReader(nil)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CODEX_HOME=" + home, "TOLLGATE_TOKEN=" + tok}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			answer, failures := codexEvents(out)
			if err != nil || len(failures) > 0 || answer == "" {
				t.Fatalf("codex: %v %v\nstdout: %s\nstderr: %s", err, failures, out, stderr.String())
			}
			if !strings.Contains(answer, tt.want) {
				t.Errorf("answer %q, want it to contain %q", answer, tt.want)
			}
		})
	}
	// A plain run makes one request; a tool run two: the call, then the
	// answer to its output.
	checkCodexBilled(t, js, "dev", map[string]int{"mock-gpt": 3, "claude-mock": 3, "gemini-mock": 2, "bedrock-mock": 2})
}

// codexEvents reads codex exec --json's JSON lines: the last agent
// message, and any error or failed turn.
func codexEvents(out []byte) (answer string, failures []string) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"item"`
			Message string `json:"message"`
			Error   struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch {
		case ev.Type == "error":
			failures = append(failures, ev.Message)
		case ev.Type == "turn.failed":
			failures = append(failures, ev.Error.Message)
		case ev.Type == "item.completed" && ev.Item.Type == "agent_message":
			answer = ev.Item.Text
		}
	}
	return answer, failures
}

// checkCodexBilled checks every usage event: a success on /v1/responses
// with the provider's counts (not estimates) and a cost, at least perModel
// of them for each model; and that the budget consumer's total for the
// department equals their sum.
func checkCodexBilled(t *testing.T, js jetstream.JetStream, dept string, perModel map[string]int) {
	t.Helper()
	evs := checkBilled(t, js)
	seen := map[string]int{}
	for _, ev := range evs {
		if ev.Endpoint != "/v1/responses" || ev.CostNanoUsd <= 0 || ev.CompletionTokens == 0 {
			t.Errorf("usage event %s: endpoint %s cost %d completion %d", ev.RequestId, ev.Endpoint, ev.CostNanoUsd, ev.CompletionTokens)
		}
		seen[ev.RequestedModel]++
	}
	for model, least := range perModel {
		if seen[model] < least {
			t.Errorf("%d usage events for %s, want at least %d", seen[model], model, least)
		}
	}
	checkDeptTotal(t, js, dept, evs)
}
