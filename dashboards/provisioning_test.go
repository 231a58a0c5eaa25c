package dashboards

import (
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestProvisioning checks that deploy/grafana provisions the data source the
// dashboards refer to and a file provider for them.
func TestProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			UID      string         `yaml:"uid"`
			Type     string         `yaml:"type"`
			JSONData map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	tests := []struct {
		name string
		file string
		into any
		ok   func() bool
	}{
		{"datasource", "../deploy/grafana/provisioning/datasources/clickhouse.yaml", &ds, func() bool {
			return ds.APIVersion == 1 && len(ds.Datasources) == 1 && ds.Datasources[0].UID == "tollgate-clickhouse" &&
				ds.Datasources[0].Type == "grafana-clickhouse-datasource" && ds.Datasources[0].JSONData["protocol"] == "native"
		}},
		{"dashboards", "../deploy/grafana/provisioning/dashboards/tollgate.yaml", &dp, func() bool {
			return dp.APIVersion == 1 && len(dp.Providers) == 1 && dp.Providers[0].Type == "file" && dp.Providers[0].Options.Path != ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, tc.into); err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !tc.ok() {
				t.Fatalf("unexpected content: %+v", tc.into)
			}
		})
	}
}
