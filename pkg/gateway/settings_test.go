package gateway

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/budget"
)

// settingsYAML is a small valid config with a mock provider; extra is
// appended as more top-level keys.
func settingsYAML(extra string) string {
	return `
listen: 127.0.0.1:0
auth:
  issuers:
    - name: dev
      issuer: tollgate-dev
      audience: tollgate
      algorithms: [HS256]
      keys:
        - {kid: k1, secret: test-secret-test-secret-test-secret}
providers:
  - {name: mock, kind: mock}
models:
  - name: mock-gpt
    targets: [{provider: mock}]
` + extra
}

func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func staticURL(u string) func() (string, error) {
	return func() (string, error) { return u, nil }
}

func TestLoadSettings(t *testing.T) {
	down := errors.New("no port")
	tests := []struct {
		name      string
		yaml      string
		mockURL   func() (string, error)
		wantErr   string // "" for a valid file
		wantErrIs error
	}{
		{name: "valid", yaml: settingsYAML(`
budgets:
  - {scope: dept, value: eng, amount_usd: "10", period: month}
prices:
  mock-gpt: {input: "1", output: "2"}
`)},
		{name: "yaml syntax", yaml: settingsYAML("garbage: [\n"), wantErr: "parse yaml"},
		{name: "unknown key", yaml: settingsYAML("colour: blue\n"), wantErr: "colour"},
		{name: "bad price", yaml: settingsYAML("prices:\n  mock-gpt: {input: lots}\n"), wantErr: `prices["mock-gpt"]`},
		{name: "limits above the global limit", yaml: settingsYAML(`
budgets:
  - {scope: global, amount_usd: "10", period: month}
  - {scope: dept, value: eng, amount_usd: "20", period: month}
`), wantErr: "global"},
		{name: "mock upstream unavailable", yaml: settingsYAML(""), mockURL: func() (string, error) { return "", down }, wantErrIs: down},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tollgate.yaml")
			writeConfig(t, path, tt.yaml)
			calls := 0
			mockURL := func() (string, error) {
				calls++
				if tt.mockURL != nil {
					return tt.mockURL()
				}
				return "http://127.0.0.1:1/v1", nil
			}
			s, err := LoadSettings(path, mockURL)
			switch {
			case tt.wantErrIs != nil:
				if !errors.Is(err, tt.wantErrIs) {
					t.Fatalf("err = %v, want %v", err, tt.wantErrIs)
				}
				return
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if calls != 1 {
				t.Errorf("mockURL called %d times, want 1", calls)
			}
			if got := s.Config.Provider("mock").BaseURL; got != "http://127.0.0.1:1/v1" {
				t.Errorf("mock provider base URL %q", got)
			}
			if s.Verifier == nil || s.Prices == nil {
				t.Fatal("no verifier or price table")
			}
			if p, ok := s.Prices.Lookup("mock-gpt"); !ok || p.InputPerM != 1e9 {
				t.Errorf("price override not applied: %+v %v", p, ok)
			}
			if len(s.Limits) != 1 {
				t.Errorf("limits %+v", s.Limits)
			}
		})
	}
}

// fakeLimits records the limits a reload sets.
type fakeLimits struct{ set [][]budget.Limit }

func (f *fakeLimits) SetLimits(l []budget.Limit) { f.set = append(f.set, l) }

func TestReloader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	writeConfig(t, path, settingsYAML(""))
	mockURL := staticURL("http://127.0.0.1:1/v1")
	s, err := LoadSettings(path, mockURL)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	limits := &fakeLimits{}
	notStarted := func() (string, error) { return "", errors.New("not started") }
	tests := []struct {
		name      string
		yaml      string
		mockURL   func() (string, error)
		wantErr   error // nil: the reload applies
		wantModel string
	}{
		{name: "new model and limit", yaml: settingsYAML(`  - name: mock-2
    targets: [{provider: mock}]
budgets:
  - {scope: dept, value: eng, amount_usd: "10", period: month}
`), mockURL: mockURL, wantModel: "mock-2"},
		{name: "invalid file keeps the running config", yaml: "garbage: [\n", mockURL: mockURL, wantErr: errors.New("parse yaml")},
		{name: "mock added without the mock upstream", yaml: settingsYAML(""), mockURL: notStarted, wantErr: errMockAdded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReloader(path, s, gw, limits, tt.mockURL, slog.New(slog.DiscardHandler))
			before, applied := r.Config(), len(limits.set)
			writeConfig(t, path, tt.yaml)
			sum, err := r.Reload()
			if tt.wantErr != nil {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr.Error()) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if r.Config() != before || len(limits.set) != applied {
					t.Fatal("a refused reload changed the running config or limits")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sum.Models != 2 || sum.Budgets != 1 || sum.Providers != 1 || sum.Prices == "" {
				t.Errorf("summary %+v", sum)
			}
			if r.Config() == before || r.Config().Model(tt.wantModel) == nil {
				t.Error("reloaded config not running")
			}
			found := false
			for _, m := range gw.Routes().Models {
				found = found || m.Model == tt.wantModel
			}
			if !found {
				t.Errorf("gateway routes lack %s", tt.wantModel)
			}
			if len(limits.set) != applied+1 || len(limits.set[applied]) != 1 {
				t.Errorf("limits set %+v", limits.set)
			}
		})
	}
}
