package config

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeysClassifyEveryField walks Config by reflection: every key a file
// can set has exactly one row in Keys, and every row names a key, so a new
// field cannot be added without saying whether a reload applies it.
func TestKeysClassifyEveryField(t *testing.T) {
	leaves := LeafKeys()
	if len(leaves) < 100 {
		t.Fatalf("LeafKeys found %d keys; the walk is broken", len(leaves))
	}
	rows := map[string]int{}
	for _, k := range Keys {
		if k.Class != Reload && k.Class != Restart {
			t.Errorf("Keys row %q: class %v", k.Path, k.Class)
		}
		if k.Class == Restart && k.Why == "" {
			t.Errorf("Keys row %q: a restart key says what holds it (Why)", k.Path)
		}
		for _, p := range ExpandPath(k.Path) {
			rows[p]++
		}
	}
	for _, l := range leaves {
		switch rows[l] {
		case 0:
			t.Errorf("config key %s has no row in config.Keys: classify it as Reload (and apply it in the gateway's reload) or Restart", l)
		case 1:
		default:
			t.Errorf("config key %s has %d rows in config.Keys", l, rows[l])
		}
	}
	for p := range rows {
		if !slices.Contains(leaves, p) {
			t.Errorf("config.Keys row %s names no key of Config", p)
		}
	}
}

// TestRemovedKeysAreGone checks that every removed key names a struct
// type that is still reachable and a key that is no longer one, so its
// advice can be matched and is never given for a live key.
func TestRemovedKeysAreGone(t *testing.T) {
	leaves := LeafKeys()
	owners := map[string]bool{"Config": true}
	for _, k := range KeyFields() {
		owners[k.Owner.Name()] = true
	}
	for _, rk := range RemovedKeys {
		if slices.Contains(leaves, rk.Path) {
			t.Errorf("removed key %s is a key of Config again: drop it from RemovedKeys", rk.Path)
		}
		if !owners[rk.Owner] {
			t.Errorf("removed key %s: type %s holds no keys; its advice would never be given", rk.Path, rk.Owner)
		}
		if !strings.Contains(rk.Advice, rk.Path) {
			t.Errorf("removed key %s: the advice does not name the key", rk.Path)
		}
	}
}

func TestExpandPath(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"nats.url", []string{"nats.url"}},
		{"log.{format,level}", []string{"log.format", "log.level"}},
		{"a.{b,c}.{d,e}", []string{"a.b.d", "a.b.e", "a.c.d", "a.c.e"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := ExpandPath(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("ExpandPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRestartChanges(t *testing.T) {
	base := func() *Config {
		c := &Config{
			NATS:      NATS{URL: "nats://127.0.0.1:4222"},
			Profiling: Profiling{Tags: map[string]string{"env": "prod"}},
			Models:    []Model{{Name: "m", Targets: []Target{{Provider: "p"}}}},
		}
		c.ApplyDefaults()
		return c
	}
	tests := []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"reload keys only", func(c *Config) {
			c.Admin.RequireToken = true
			c.Models = append(c.Models, Model{Name: "n", Targets: []Target{{Provider: "p"}}})
			c.Usage.UnpricedModel = UnpricedRefuse
			c.ShutdownGrace = time.Minute
		}, nil},
		{"nats.url", func(c *Config) { c.NATS.URL = "nats://10.0.0.1:4222" }, []string{"nats.url"}},
		{"several", func(c *Config) {
			c.Log.Level = "debug"
			c.Listen = "127.0.0.1:1"
			c.Budget.Leases.TTL = time.Minute
		}, []string{"listen", "log.level", "budget.leases.ttl"}},
		{"map value", func(c *Config) { c.Profiling.Tags["env"] = "dev" }, []string{"profiling.tags"}},
		{"map key added", func(c *Config) { c.Profiling.Tags["zone"] = "a" }, []string{"profiling.tags"}},
		{"nested", func(c *Config) { c.NATS.TLS.CAFile = "/ca.pem" }, []string{"nats.tls.ca_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := base()
			tt.edit(after)
			if got := RestartChanges(base(), after); !slices.Equal(got, tt.want) {
				t.Errorf("RestartChanges = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCollectLists covers the list and map walk of RestartChanges on
// keys inside lists, which no Restart row has today.
func TestCollectLists(t *testing.T) {
	c := &Config{Models: []Model{{Name: "a"}, {Name: "b", Cache: ModelCache{TTL: time.Minute}}},
		Prices: map[string]Price{"y": {Input: "2"}, "x": {Input: "1"}}}
	var got []any
	collect(reflect.ValueOf(c).Elem(), strings.Split("models[].cache.ttl", "."), &got)
	if want := []any{2, time.Duration(0), time.Minute}; !reflect.DeepEqual(got, want) {
		t.Errorf("models[].cache.ttl: %v, want %v", got, want)
	}
	got = nil
	collect(reflect.ValueOf(c).Elem(), strings.Split("prices.*.input", "."), &got)
	if want := []any{"x", "1", "y", "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("prices.*.input: %v, want %v", got, want)
	}
}

var update = flag.Bool("update", false, "rewrite the generated docs (the restart-only key list, the configuration reference)")

// restartDoc is the page whose restart-only key list is generated from Keys.
const restartDoc = "../../docs/operations.md"

// Markers of the generated list in restartDoc.
const (
	docBegin = "<!-- restart-keys: generated from config.Keys (pkg/config/keys.go) by `go test ./pkg/config -run TestRestartKeyList -update`; edit the table, not this list -->\n"
	docEnd   = "<!-- /restart-keys -->\n"
)

// restartKeysDoc is the operations page's list of the keys a reload does not
// apply, and of the ones it applies under a condition.
func restartKeysDoc() string {
	var b strings.Builder
	b.WriteString(docBegin)
	b.WriteString("| Key | Held from start by |\n|---|---|\n")
	for _, k := range Keys {
		if k.Class == Restart {
			b.WriteString("| `" + k.Path + "` | " + k.Why + " |\n")
		}
	}
	b.WriteString("\nApplied by a reload, with a condition:\n\n| Key | Refused when |\n|---|---|\n")
	for _, k := range Keys {
		if k.Class == Reload && k.Why != "" {
			b.WriteString("| `" + k.Path + "` | " + k.Why + " |\n")
		}
	}
	b.WriteString(docEnd)
	return b.String()
}

// TestRestartKeyList fails when the operations page's list of
// restart-only keys is not the one Keys generates; -update rewrites it.
func TestRestartKeyList(t *testing.T) {
	src, err := os.ReadFile(restartDoc)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(src, []byte(docBegin))
	j := bytes.Index(src, []byte(docEnd))
	if i < 0 || j < i {
		t.Fatalf("%s has no generated restart-key list (markers %q ... %q)", restartDoc, docBegin, docEnd)
	}
	got, want := string(src[i:j+len(docEnd)]), restartKeysDoc()
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("docs/operations.md's restart-only key list differs from config.Keys; run go test ./pkg/config -run TestRestartKeyList -update\ngot:\n%s\nwant:\n%s", got, want)
	}
	out := append(append(append([]byte{}, src[:i]...), want...), src[j+len(docEnd):]...)
	if err := os.WriteFile(restartDoc, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
