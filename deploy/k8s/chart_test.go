package k8s

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/pkg/config"
)

var update = flag.Bool("update", false, "rewrite the kustomize base from the chart")

// chartDir is the Helm chart; the kustomize base in this directory is
// rendered from it.
const chartDir = "../helm/tollgate"

// kubeVersion is the Kubernetes version the chart is rendered and linted
// for (the oldest its Chart.yaml's kubeVersion admits is 1.27).
const kubeVersion = "v1.33.0"

// render renders the chart as release "tollgate" with vals over its
// values.yaml, strictly (a template naming a value that does not exist
// fails), and returns each template's output by file name, empty ones
// left out.
func render(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	rv, err := util.ToRenderValues(ch, copyValues(t, vals), common.ReleaseOptions{Name: "tollgate", Namespace: "tollgate", IsInstall: true}, caps)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	out, err := engine.Engine{Strict: true}.RenderWithContext(context.Background(), ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	files := map[string]string{}
	for name, text := range out {
		if path.Ext(name) == ".yaml" && len(bytes.TrimSpace(stripComments([]byte(text)))) > 0 {
			files[path.Base(name)] = text
		}
	}
	return files
}

// copyValues copies v: Helm merges the chart's defaults into the map it is
// given, and the scenarios must stay as written.
func copyValues(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// valuesFile reads a values file.
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// generatedHeader opens every manifest of the kustomize base.
const generatedHeader = "# Generated from the Helm chart deploy/helm/tollgate with chart-values.yaml;\n" +
	"# edit the chart, then: go test ./deploy/k8s -run TestKustomizeBaseFromChart -update\n"

// TestKustomizeBaseFromChart: the kustomize base is the chart rendered with
// chart-values.yaml, file by file, and its tollgate.yaml is the chart's
// files/tollgate.yaml, so the two ways to install cannot drift. -update
// rewrites them.
func TestKustomizeBaseFromChart(t *testing.T) {
	files := render(t, valuesFile(t, "chart-values.yaml"))
	want := map[string]string{}
	for name, text := range files {
		want[name] = generatedHeader + strings.TrimLeft(text, "\n")
	}
	cfg, err := os.ReadFile(filepath.Join(chartDir, "files", "tollgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want["tollgate.yaml"] = string(cfg)
	k := readKustomization(t)
	for name, text := range want {
		if name != "tollgate.yaml" && !slices.Contains(k.Resources, name) {
			t.Errorf("the chart renders %s, which kustomization.yaml does not list", name)
		}
		if *update {
			if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(name)
		if err != nil || string(got) != text {
			t.Errorf("%s differs from the chart's rendering (err %v); regenerate: go test ./deploy/k8s -run TestKustomizeBaseFromChart -update", name, err)
		}
	}
	for _, r := range k.Resources {
		if _, ok := want[r]; !ok && r != "namespace.yaml" {
			t.Errorf("kustomization.yaml lists %s, which the chart does not render", r)
		}
	}
}

// TestChartLint runs Helm's linter (Chart.yaml, values, every template
// rendered and parsed) on the chart with each set of values the tests
// render; an error or a warning fails.
func TestChartLint(t *testing.T) {
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range chartScenarios {
		t.Run(sc.name, func(t *testing.T) {
			l := lint.RunAll(chartDir, copyValues(t, sc.values), "tollgate", lint.WithKubeVersion(kv))
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m)
				}
			}
		})
	}
}

// chartScenarios are the value sets the chart is rendered with: the
// defaults, and each switch in values.yaml turned.
var chartScenarios = []struct {
	name   string
	values map[string]any
}{
	{"defaults", nil},
	{"bundled NATS", map[string]any{"nats": map[string]any{"bundled": map[string]any{"enabled": true}}}},
	{"bundled NATS, one server", map[string]any{"nats": map[string]any{"replicas": 1, "bundled": map[string]any{"enabled": true, "replicas": 1}}}},
	{"persistent spool", map[string]any{"gateway": map[string]any{"spool": map[string]any{"persistent": true, "storageClassName": "fast"}}}},
	{"no autoscaler, no PDB, no JWT key secret", map[string]any{
		"gateway": map[string]any{"autoscaling": map[string]any{"enabled": false}, "pdb": map[string]any{"enabled": false}},
		"secrets": map[string]any{"jwtKeys": ""}}},
	{"own config and image tag", map[string]any{"config": map[string]any{"file": "listen: 0.0.0.0:8080\n"}, "image": map[string]any{"tag": "v1.2.3"}}},
}

// manifests splits rendered files into their documents, each decoded
// strictly into its Kubernetes API type (validate), keyed "Kind/name".
func manifests(t *testing.T, files map[string]string) map[string]any {
	t.Helper()
	objs := map[string]any{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for i, doc := range documents(t, []byte(files[n])) {
			if err := validate(doc); err != nil {
				t.Fatalf("%s#%d: %v\n%s", n, i, err, doc)
			}
			var tm struct{ APIVersion, Kind string }
			var meta struct {
				Metadata struct{ Name string }
			}
			_ = yaml.Unmarshal(doc, &tm)
			_ = yaml.Unmarshal(doc, &meta)
			obj := apiTypes[tm.APIVersion+"/"+tm.Kind]()
			if err := yaml.Unmarshal(doc, obj); err != nil {
				t.Fatal(err)
			}
			key := tm.Kind + "/" + meta.Metadata.Name
			if _, dup := objs[key]; dup {
				t.Fatalf("%s rendered twice", key)
			}
			objs[key] = obj
		}
	}
	return objs
}

func envOf(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestChartRenders renders the chart with every scenario: each manifest
// must be a valid Kubernetes object, and what each switch promises must
// hold in what it renders.
func TestChartRenders(t *testing.T) {
	for _, sc := range chartScenarios {
		t.Run(sc.name, func(t *testing.T) {
			files := render(t, sc.values)
			objs := manifests(t, files)
			get := func(key string) any {
				t.Helper()
				o, ok := objs[key]
				if !ok {
					keys := make([]string, 0, len(objs))
					for k := range objs {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					t.Fatalf("no %s; rendered %v", key, keys)
				}
				return o
			}
			bundled := strings.HasPrefix(sc.name, "bundled NATS")
			persistent := sc.name == "persistent spool"
			var gwPod corev1.PodSpec
			if persistent {
				ss := get("StatefulSet/tollgate-gateway").(*appsv1.StatefulSet)
				gwPod = ss.Spec.Template.Spec
				if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "spool" ||
					ss.Spec.VolumeClaimTemplates[0].Spec.StorageClassName == nil || *ss.Spec.VolumeClaimTemplates[0].Spec.StorageClassName != "fast" {
					t.Errorf("gateway StatefulSet claims %+v, want one spool volume of class fast", ss.Spec.VolumeClaimTemplates)
				}
				if slices.ContainsFunc(gwPod.Volumes, func(v corev1.Volume) bool { return v.Name == "spool" }) {
					t.Error("the persistent spool is also an emptyDir")
				}
				if _, ok := objs["Deployment/tollgate-gateway"]; ok {
					t.Error("a gateway Deployment beside the StatefulSet")
				}
			} else {
				gwPod = get("Deployment/tollgate-gateway").(*appsv1.Deployment).Spec.Template.Spec
			}
			if hpa, ok := objs["HorizontalPodAutoscaler/tollgate-gateway"].(*autoscalingv2.HorizontalPodAutoscaler); ok {
				if want := map[bool]string{true: "StatefulSet", false: "Deployment"}[persistent]; hpa.Spec.ScaleTargetRef.Kind != want {
					t.Errorf("the autoscaler scales a %s, want %s", hpa.Spec.ScaleTargetRef.Kind, want)
				}
			} else if sc.values["gateway"] == nil || persistent {
				t.Error("no autoscaler by default")
			}
			// Every program finds NATS where the chart runs or names it.
			wantURL := "nats://nats.nats.svc.cluster.local:4222"
			if bundled {
				wantURL = "nats://tollgate-nats:4222"
				get("Service/tollgate-nats")
			}
			pods := map[string]corev1.PodSpec{"gateway": gwPod,
				"budget":    get("Deployment/tollgate-budget").(*appsv1.Deployment).Spec.Template.Spec,
				"analytics": get("Deployment/tollgate-analytics").(*appsv1.Deployment).Spec.Template.Spec}
			for prog, pod := range pods {
				c := pod.Containers[0]
				if u, _ := envOf(c, "TOLLGATE_NATS_URL"); u != wantURL {
					t.Errorf("%s: TOLLGATE_NATS_URL %q, want %q", prog, u, wantURL)
				}
				if tag, _ := sc.values["image"].(map[string]any); tag != nil && c.Image != "tollgate/tollgate:v1.2.3" {
					t.Errorf("%s: image %q, want the tag set", prog, c.Image)
				}
				if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
					return v.ConfigMap != nil && v.ConfigMap.Name == "tollgate-config"
				}) {
					t.Errorf("%s: no volume of the tollgate-config ConfigMap", prog)
				}
			}
			if _, ok := objs["PodDisruptionBudget/tollgate-gateway"]; ok == strings.Contains(sc.name, "no PDB") {
				t.Errorf("PDB rendered %v, scenario %q", ok, sc.name)
			}
			hasKeys := slices.ContainsFunc(gwPod.Volumes, func(v corev1.Volume) bool { return v.Name == "jwt-keys" })
			if hasKeys == strings.Contains(sc.name, "no JWT key secret") {
				t.Errorf("jwt-keys volume %v, scenario %q", hasKeys, sc.name)
			}
			// The ConfigMap holds a config every program can load.
			cm := get("ConfigMap/tollgate-config").(*corev1.ConfigMap)
			cfgText := cm.Data["tollgate.yaml"]
			if own, _ := sc.values["config"].(map[string]any); own != nil {
				if cfgText != own["file"] {
					t.Errorf("config %q, want the file given", cfgText)
				}
			} else {
				env := map[string]string{}
				for _, e := range gwPod.Containers[0].Env {
					env[e.Name] = e.Value
				}
				cfg, err := config.Parse([]byte(cfgText), func(k string) string {
					if strings.HasSuffix(k, "_API_KEY") {
						return "sk-test"
					}
					return env[k]
				})
				if err != nil {
					t.Fatalf("the chart's config does not load: %v", err)
				}
				wantReplicas := 3
				if nv, _ := sc.values["nats"].(map[string]any); nv["replicas"] != nil {
					wantReplicas = nv["replicas"].(int)
				}
				if cfg.NATS.URL != wantURL || cfg.NATS.Replicas != wantReplicas {
					t.Errorf("config nats %s x%d, want %s x%d", cfg.NATS.URL, cfg.NATS.Replicas, wantURL, wantReplicas)
				}
			}
			if bundled {
				checkNATSConf(t, get("ConfigMap/tollgate-nats").(*corev1.ConfigMap).Data["nats.conf"],
					get("StatefulSet/tollgate-nats").(*appsv1.StatefulSet))
			}
		})
	}
}

// TestChartRollsOnConfigChange: a changed config changes the pods'
// checksum annotation, so helm upgrade rolls them.
func TestChartRollsOnConfigChange(t *testing.T) {
	sum := func(file string) string {
		objs := manifests(t, render(t, map[string]any{"config": map[string]any{"file": file}}))
		return objs["Deployment/tollgate-budget"].(*appsv1.Deployment).Spec.Template.Annotations["checksum/config"]
	}
	a, b := sum("listen: 0.0.0.0:8080\n"), sum("listen: 0.0.0.0:8081\n")
	if a == "" || a == b {
		t.Fatalf("checksums %q and %q, want two different ones", a, b)
	}
}

// checkNATSConf runs the bundled servers' config through nats-server's
// own check (-t), with the environment the StatefulSet gives it, and
// checks the cluster routes name every replica.
func checkNATSConf(t *testing.T, conf string, ss *appsv1.StatefulSet) {
	t.Helper()
	n := int(*ss.Spec.Replicas)
	for i := range n {
		route := fmt.Sprintf("nats://tollgate-nats-%d.tollgate-nats-headless:6222", i)
		if n > 1 && !strings.Contains(conf, route) {
			t.Errorf("nats.conf has no route %s:\n%s", route, conf)
		}
	}
	if n == 1 && strings.Contains(conf, "cluster") {
		t.Errorf("one server with a cluster block:\n%s", conf)
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found (scripts/deps.sh installs it): %v", err)
		}
		t.Skipf("nats-server not found; run scripts/deps.sh: %v", err)
	}
	dir := t.TempDir()
	// The server would create its store_dir: point it at a temp dir.
	conf = strings.ReplaceAll(conf, `store_dir: "/data"`, fmt.Sprintf("store_dir: %q", filepath.Join(dir, "data")))
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-t", "-c", file)
	cmd.Env = append(os.Environ(), "POD_NAME=tollgate-nats-0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats-server -t: %v\n%s\n%s", err, out, conf)
	}
}
