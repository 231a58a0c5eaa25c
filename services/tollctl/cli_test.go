package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/natstest"
)

// TestFlagsAfterArguments runs every command that takes a positional
// argument with its flags after it, as `tollctl keys revoke ID --nats URL`,
// and checks that each flag took effect (Go's flag package read them as
// more arguments).
func TestFlagsAfterArguments(t *testing.T) {
	t.Run("keys create, rotate and revoke", func(t *testing.T) {
		url := natstest.Start(t).ClientURL()
		code, out, errOut := run1(t, nil, "keys", "create", "--sub", "s", "--json", "--nats", url, "--dept", "d")
		var created struct{ ID, Key string }
		if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created.ID == "" {
			t.Fatalf("create: exit %d: %s%s", code, out, errOut)
		}
		code, out, errOut = run1(t, nil, "keys", "rotate", created.ID, "--json", "--nats", url)
		var rotated struct{ ID, Key string }
		if code != 0 || json.Unmarshal([]byte(out), &rotated) != nil || rotated.ID != created.ID || rotated.Key == created.Key {
			t.Fatalf("rotate ID --json --nats URL: exit %d: %s%s", code, out, errOut)
		}
		code, out, errOut = run1(t, nil, "keys", "revoke", "--actor", "bob", created.ID, "--nats", url)
		if code != 0 || !strings.Contains(out, "revoked API key "+created.ID) {
			t.Fatalf("revoke --actor bob ID --nats URL: exit %d: %s%s", code, out, errOut)
		}
		code, out, _ = run1(t, nil, "audit", "--json", "--nats", url)
		if code != 0 || !strings.Contains(out, `"actor":"bob"`) {
			t.Fatalf("the revocation's audit event lacks the --actor given after the ID: %s", out)
		}
	})

	t.Run("config check", func(t *testing.T) {
		cfg := writeFile(t, t.TempDir(), "tollgate.yaml", "providers: [{name: m, kind: mock}]\n")
		code, _, errOut := run1(t, nil, "config", "check", cfg, "--bogus")
		if code != 2 || !strings.Contains(errOut, "unknown flag: --bogus") {
			t.Fatalf("config check FILE --bogus: exit %d, want 2 and an unknown flag: %s", code, errOut)
		}
		code, out, _ := run1(t, nil, "config", "check", cfg, "--help")
		if code != 0 || !strings.Contains(out, "Usage: tollctl config check FILE") {
			t.Fatalf("config check FILE --help: exit %d: %s", code, out)
		}
	})

	t.Run("prices import", func(t *testing.T) {
		code, out, errOut := run1(t, nil, "prices", "import", "../../pkg/pricing/testdata/litellm_model_prices.json",
			"--format", "litellm", "--version", "after-1")
		if code != 0 || !strings.Contains(out, "price table after-1 against") {
			t.Fatalf("prices import FILE --format litellm --version after-1: exit %d: %s%s", code, out, errOut)
		}
	})

	t.Run("explain and statement verify", func(t *testing.T) {
		addr, db, st := migratedStore(t, "after")
		ctx := context.Background()
		b, err := st.Conn().PrepareBatch(ctx, "INSERT INTO usage_events (event_id, request_id, ts, ts_ms, dept, team, project, served_model, cost_nano_usd, pricing_version, ingested_at)")
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Date(2024, 3, 10, 0, 0, 0, 0, time.UTC)
		if err := b.Append("req-after", "req-after", ts, uint64(ts.UnixMilli()), "eng", "ml", "p", "gpt-5", int64(2_000_000_000), "x", time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run1(t, nil, "explain", "req-after", "--clickhouse", addr, "--database", db, "--json")
		if code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, "req-after") {
			t.Fatalf("explain ID --clickhouse ADDR --database DB --json: exit %d: %s%s", code, out, errOut)
		}

		seed := bytes.Repeat([]byte{0xab}, ed25519.SeedSize)
		key := writeFile(t, t.TempDir(), "seed.hex", hex.EncodeToString(seed))
		dir := t.TempDir()
		env := map[string]string{"TOLLGATE_CLICKHOUSE": addr}
		if code, _, errOut := run1(t, env, "statement", "--dept", "eng", "--month", "2024-03", "--key", key, "--dir", dir, "--database", db); code != 0 {
			t.Fatalf("statement: exit %d: %s", code, errOut)
		}
		pub := hex.EncodeToString(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
		code, out, errOut = run1(t, nil, "statement", "verify", dir, "--pubkey", pub)
		if code != 0 || out != "1 statements verified\n" {
			t.Fatalf("statement verify DIR --pubkey KEY: exit %d: %s%s", code, out, errOut)
		}
		other := hex.EncodeToString(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey))
		if code, _, _ := run1(t, nil, "statement", "verify", dir, "--pubkey", other); code != 1 {
			t.Fatalf("statement verify DIR --pubkey OTHER: exit %d, want 1", code)
		}
	})
}

// TestGoStyleFlags: the single-dash long flags of Go's flag package, which
// earlier versions printed in their help, still work.
func TestGoStyleFlags(t *testing.T) {
	env := map[string]string{"TOLLGATE_DEV_SECRET": devSecret}
	code, out, errOut := run1(t, env, "token", "-sub", "alice", "-ttl", "2h", "-admin", "-models=mock-*")
	if code != 0 {
		t.Fatalf("token -sub alice ...: exit %d: %s", code, errOut)
	}
	tok, err := jwt.Parse(strings.TrimSpace(out), func(*jwt.Token) (any, error) { return []byte(devSecret), nil },
		jwt.WithValidMethods([]string{"HS256"}))
	if err != nil {
		t.Fatal(err)
	}
	claims := tok.Claims.(jwt.MapClaims)
	if claims["sub"] != "alice" || claims["admin"] != true || !equal(claims["models"], []any{"mock-*"}) {
		t.Errorf("claims %v", claims)
	}
	// A value is never taken for a flag: "--reason -json" is a reason.
	url := natstest.Start(t).ClientURL()
	if code, out, errOut := run1(t, nil, "revoke", "-jti", "k1", "--reason", "-json", "-nats", url); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke -jti k1 --reason -json: exit %d: %s%s", code, out, errOut)
	}
	if code, out, _ := run1(t, nil, "revocations", "-nats", url); code != 0 || !strings.Contains(out, "-json") {
		t.Fatalf("revocations: exit %d: %s", code, out)
	}
}

// TestGlobalFlagVariables: each global flag takes its environment variable
// as its default, and the command line wins over it.
func TestGlobalFlagVariables(t *testing.T) {
	live := natstest.Start(t).ClientURL()
	dead := "nats://127.0.0.1:1"
	t.Run("TOLLGATE_NATS_URL", func(t *testing.T) {
		if code, _, errOut := run1(t, map[string]string{"TOLLGATE_NATS_URL": live}, "revocations"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if code, _, errOut := run1(t, map[string]string{"TOLLGATE_NATS_URL": dead}, "revocations", "--nats", live); code != 0 {
			t.Fatalf("--nats does not win over the variable: exit %d: %s", code, errOut)
		}
		if code, _, errOut := run1(t, map[string]string{"TOLLGATE_NATS_URL": dead}, "revocations"); code != 1 || !strings.Contains(errOut, "127.0.0.1:1") {
			t.Fatalf("the variable is not read: exit %d: %s", code, errOut)
		}
	})
	t.Run("TOLLGATE_CONFIG", func(t *testing.T) {
		dir := t.TempDir()
		cfg := writeFile(t, dir, "tollgate.yaml", strings.ReplaceAll(testConfig, "corp.secret", filepath.Join(dir, "corp.secret")))
		writeFile(t, dir, "corp.secret", corpSecret+"\n")
		env := map[string]string{"TOLLGATE_CONFIG": cfg, "TOLLGATE_DEV_SECRET": devSecret}
		code, out, errOut := run1(t, env, "token", "--sub", "a")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		tok, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(out), jwt.MapClaims{})
		if err != nil || tok.Claims.(jwt.MapClaims)["iss"] != "tollgate-dev" {
			t.Fatalf("token with TOLLGATE_CONFIG: %v %v, want the config's issuer tollgate-dev", tok, err)
		}
	})
	t.Run("help shows the default, not the variable", func(t *testing.T) {
		code, out, _ := run1(t, map[string]string{"TOLLGATE_CLICKHOUSE": "clickhouse://u:secret@h:9000/db"}, "help", "replay")
		if code != 0 || strings.Contains(out, "secret") || !strings.Contains(out, `(default "127.0.0.1:9000")`) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

// TestHelpEveryCommand: `tollctl help COMMAND` and `tollctl COMMAND --help`
// print the same help, with a usage line and examples, for every command.
func TestHelpEveryCommand(t *testing.T) {
	for _, c := range documented(referenceRoot()) {
		name := commandName(c)
		if c.Parent().Name() == "completion" {
			continue // cobra's own, with their own help
		}
		t.Run(name, func(t *testing.T) {
			words := strings.Fields(name)
			code, help, errOut := run1(t, nil, append([]string{"help"}, words...)...)
			if code != 0 || errOut != "" {
				t.Fatalf("help %s: exit %d: %s", name, code, errOut)
			}
			code, flagHelp, _ := run1(t, nil, append(words, "--help")...)
			if code != 0 || flagHelp != help {
				t.Errorf("%s --help: exit %d, and its help differs from `help %s`:\n%s", name, code, name, flagHelp)
			}
			for _, want := range []string{"Usage: tollctl " + name, "Examples:\n  "} {
				if !strings.Contains(help, want) {
					t.Errorf("help %s lacks %q:\n%s", name, want, help)
				}
			}
		})
	}
}

// TestCompletion: the shell completion scripts, and the completions they
// ask tollctl for.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			code, out, errOut := run1(t, nil, "completion", shell)
			if code != 0 || !strings.Contains(out, "tollctl") || !strings.Contains(out, "__complete") {
				t.Fatalf("completion %s: exit %d: %.200s%s", shell, code, out, errOut)
			}
		})
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"keys", ""}, []string{"create", "list", "revoke", "rotate"}},
		{[]string{"sta"}, []string{"statement"}},
		{[]string{"keys", "revoke", "--"}, []string{"--actor", "--nats", "--config"}},
		{[]string{"help", "keys", "r"}, []string{"revoke", "rotate"}},
		{[]string{"replay", "--to", ""}, []string{"clickhouse", "budgets", "ndjson"}},
		{[]string{"prices", "import", "f.json", "--format", ""}, []string{"litellm", "models.dev"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := run1(t, nil, append([]string{"__complete"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w+"\t") && !strings.Contains(out, w+"\n") {
					t.Errorf("completions lack %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestReferenceCurrent fails when docs/tollctl.md is not what the commands
// generate.
func TestReferenceCurrent(t *testing.T) {
	var want bytes.Buffer
	writeReference(&want, referenceRoot())
	got, err := os.ReadFile("../../docs/tollctl.md")
	if err != nil {
		t.Fatalf("%v; run `%s` from the repository root", err, regenerate)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("docs/tollctl.md is stale: run `%s` from the repository root (or go generate ./services/tollctl)", regenerate)
	}
}
