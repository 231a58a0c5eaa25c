package docker

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/config"
)

type compose struct {
	Services map[string]struct {
		Image       string         `yaml:"image"`
		Build       map[string]any `yaml:"build"`
		Command     []string       `yaml:"command"`
		Volumes     []string       `yaml:"volumes"`
		DependsOn   map[string]any `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func load(t *testing.T) compose {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	return c
}

func TestCompose(t *testing.T) {
	c := load(t)
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Binaries(string(dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		service string
		binary  string // from our image; "" for third-party images
		health  bool
	}{
		{"nats", "", true},
		{"clickhouse", "", true},
		{"grafana", "", true},
		{"gateway", "gateway", false},
		{"budget", "budget", false},
		{"analytics", "analytics", false},
		{"mockllm", "mockllm", false},
	}
	for _, tc := range tests {
		t.Run(tc.service, func(t *testing.T) {
			s, ok := c.Services[tc.service]
			if !ok {
				t.Fatalf("no service %s", tc.service)
			}
			if tc.health && (s.Healthcheck == nil || len(s.Healthcheck.Test) < 2) {
				t.Errorf("no health check")
			}
			if tc.binary != "" {
				if s.Build["dockerfile"] != "deploy/docker/Dockerfile" || len(s.Command) == 0 || s.Command[0] != "/usr/local/bin/"+tc.binary {
					t.Errorf("build %v command %v", s.Build, s.Command)
				}
				if len(s.Command) > 0 && !slices.Contains(bins, s.Command[0]) {
					t.Errorf("the image has no %s (it has %q)", s.Command[0], bins)
				}
			} else if s.Image == "" {
				t.Errorf("no image")
			}
			for dep := range s.DependsOn {
				if _, ok := c.Services[dep]; !ok {
					t.Errorf("depends on unknown service %s", dep)
				}
			}
			for _, v := range s.Volumes {
				src := strings.SplitN(v, ":", 2)[0]
				if strings.HasPrefix(src, "./") {
					if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
						t.Errorf("bind mount source: %v", err)
					}
				} else if _, ok := c.Volumes[src]; !ok {
					t.Errorf("volume %s not declared", src)
				}
			}
		})
	}
	if img := c.Services["grafana"]; !strings.Contains(strings.Join(img.Volumes, " "), "./deploy/grafana/provisioning:/etc/grafana/provisioning") {
		t.Errorf("grafana lacks the provisioning mount: %v", img.Volumes)
	}
}

// TestImageConfig checks the config baked into the image: it loads, and
// the ports and hosts it names are the compose file's.
func TestImageConfig(t *testing.T) {
	cfg, err := config.Load("tollgate.yaml")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	tests := []struct {
		name, got, want string
	}{
		{"listen", cfg.Listen, "0.0.0.0:8080"},
		{"nats", cfg.NATS.URL, "nats://nats:4222"},
		{"spool in the gateway volume", filepath.Dir(cfg.Usage.SpoolDir), "/home/nonroot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("%s = %q, want %q", tc.name, tc.got, tc.want)
			}
		})
	}
	mock := regexp.MustCompile(`base_url: http://mockllm:9999/v1`)
	b, _ := os.ReadFile("tollgate.yaml")
	if !mock.Match(b) {
		t.Error("no provider on the mockllm service")
	}
}
