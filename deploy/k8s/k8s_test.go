package k8s

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/deploy/docker"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/profiling"
)

type kustomization struct {
	Namespace          string
	Resources          []string
	ConfigMapGenerator []struct {
		Name  string
		Files []string
	} `yaml:"configMapGenerator"`
	Images []struct{ Name string }
}

type metadata struct {
	Name   string
	Labels map[string]string
}

// object is one Kubernetes manifest; spec is decoded again per kind.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   metadata
	Spec       yaml.Node
	file       string
}

type deploymentSpec struct {
	Replicas int
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	Template struct {
		Metadata metadata
		Spec     podSpec
	}
}

type podSpec struct {
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container
	Volumes                       []struct {
		Name      string
		ConfigMap *struct{ Name string } `yaml:"configMap"`
		Secret    *struct {
			SecretName string `yaml:"secretName"`
		}
		EmptyDir *struct{} `yaml:"emptyDir"`
	}
}

type container struct {
	Name, Image string
	Command     []string
	Args        []string
	Env         []struct{ Name, Value string }
	EnvFrom     []struct {
		SecretRef *struct {
			Name     string
			Optional bool
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct{ Requests, Limits map[string]string }
	VolumeMounts   []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port string
	} `yaml:"httpGet"`
	TCPSocket *struct{ Port string } `yaml:"tcpSocket"`
}

func (p *probe) port() string {
	switch {
	case p.HTTPGet != nil:
		return p.HTTPGet.Port
	case p.TCPSocket != nil:
		return p.TCPSocket.Port
	}
	return ""
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	var k kustomization
	decodeFile(t, "kustomization.yaml", &k)
	return k
}

func decodeFile(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// objects returns every YAML document of every resource file.
func objects(t *testing.T) []object {
	t.Helper()
	var objs []object
	for _, f := range readKustomization(t).Resources {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("resource %s: %v", f, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			o.file = f
			objs = append(objs, o)
		}
	}
	return objs
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return object{}
}

func decodeSpec(t *testing.T, o object, v any) {
	t.Helper()
	if err := o.Spec.Decode(v); err != nil {
		t.Fatalf("%s %s spec: %v", o.Kind, o.Metadata.Name, err)
	}
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// quantity parses the Kubernetes quantities used here: plain numbers, m
// (milli) and Ki/Mi/Gi.
func quantity(t *testing.T, s string) float64 {
	t.Helper()
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"m", 1e-3}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("quantity %q: %v", s, err)
	}
	return n * mult
}

func TestKustomization(t *testing.T) {
	k := readKustomization(t)
	t.Run("namespace", func(t *testing.T) {
		if k.Namespace == "" {
			t.Error("no namespace")
		}
	})
	t.Run("every manifest is listed", func(t *testing.T) {
		files, err := filepath.Glob("*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var generated []string
		for _, g := range k.ConfigMapGenerator {
			generated = append(generated, g.Files...)
		}
		for _, f := range files {
			// chart-values.yaml: the values the resources are rendered
			// from (chart_test.go).
			if f != "kustomization.yaml" && f != "chart-values.yaml" && !slices.Contains(k.Resources, f) && !slices.Contains(generated, f) {
				t.Errorf("%s is neither a resource nor a generator file", f)
			}
		}
	})
	t.Run("generator files exist", func(t *testing.T) {
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.Files {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("configMapGenerator %s: %v", g.Name, err)
				}
			}
		}
	})
	t.Run("every image can be set", func(t *testing.T) {
		for _, o := range objects(t) {
			if o.Kind != "Deployment" {
				continue
			}
			var d deploymentSpec
			decodeSpec(t, o, &d)
			for _, c := range d.Template.Spec.Containers {
				if !slices.ContainsFunc(k.Images, func(i struct{ Name string }) bool { return i.Name == c.Image }) {
					t.Errorf("%s: image %q is not in the kustomization's images", o.Metadata.Name, c.Image)
				}
			}
		}
	})
}

func TestManifests(t *testing.T) {
	objs := objects(t)
	apiVersions := map[string]string{
		"Namespace":               "v1",
		"Deployment":              "apps/v1",
		"Service":                 "v1",
		"PodDisruptionBudget":     "policy/v1",
		"HorizontalPodAutoscaler": "autoscaling/v2",
	}
	kinds := map[string]int{}
	for _, o := range objs {
		t.Run(o.file+"/"+o.Kind, func(t *testing.T) {
			want, ok := apiVersions[o.Kind]
			switch {
			case !ok:
				t.Errorf("unexpected kind %q", o.Kind)
			case o.APIVersion != want:
				t.Errorf("apiVersion %q, want %q", o.APIVersion, want)
			}
			if o.Metadata.Name == "" {
				t.Error("no metadata.name")
			}
			if o.Kind != "Namespace" && o.Spec.Kind == 0 {
				t.Error("no spec")
			}
		})
		kinds[o.Kind]++
	}
	want := map[string]int{"Namespace": 1, "Deployment": 3, "Service": 1, "PodDisruptionBudget": 1, "HorizontalPodAutoscaler": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s, want %d", kinds[k], k, n)
		}
	}
}

// imageBinaries returns the programs the Dockerfile puts in the image.
func imageBinaries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	bins, err := docker.Binaries(string(b))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return bins
}

func TestDeployments(t *testing.T) {
	objs := objects(t)
	gen := readKustomization(t).ConfigMapGenerator[0].Name
	bins := imageBinaries(t)
	for _, name := range []string{"tollgate-gateway", "tollgate-budget", "tollgate-analytics"} {
		t.Run(name, func(t *testing.T) {
			var d deploymentSpec
			decodeSpec(t, find(t, objs, "Deployment", name), &d)
			if !subset(d.Selector.MatchLabels, d.Template.Metadata.Labels) {
				t.Errorf("selector %v does not select the pod labels %v", d.Selector.MatchLabels, d.Template.Metadata.Labels)
			}
			pod := d.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			if c.Image == "" {
				t.Error("no image")
			}
			// The image's entrypoint is empty: without a command naming one
			// of its programs the container would try to execute "-config".
			program := docker.BinDir + "/" + strings.TrimPrefix(name, "tollgate-")
			if len(c.Command) != 1 || c.Command[0] != program {
				t.Errorf("command %q, want [%s]", c.Command, program)
			}
			if len(c.Command) > 0 && !slices.Contains(bins, c.Command[0]) {
				t.Errorf("command %s is not in the image, which has %q", c.Command[0], bins)
			}
			for _, res := range []string{"cpu", "memory"} {
				req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
				if req == "" || lim == "" {
					t.Errorf("%s: request %q, limit %q; want both", res, req, lim)
					continue
				}
				if quantity(t, lim) < quantity(t, req) {
					t.Errorf("%s limit %s below request %s", res, lim, req)
				}
			}
			ports := map[string]bool{}
			for _, p := range c.Ports {
				ports[p.Name] = true
			}
			for which, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p != nil && !ports[p.port()] {
					t.Errorf("%s probe port %q is not a named container port", which, p.port())
				}
			}
			if c.LivenessProbe == nil {
				t.Error("no liveness probe")
			}
			if !slices.ContainsFunc(c.Env, func(e struct{ Name, Value string }) bool { return e.Name == profiling.EnvServerAddress }) {
				t.Errorf("no %s to turn profiling on", profiling.EnvServerAddress)
			}
			volumes := map[string]bool{}
			var configVolume string
			for _, v := range pod.Volumes {
				volumes[v.Name] = true
				if v.ConfigMap != nil && v.ConfigMap.Name == gen {
					configVolume = v.Name
				}
			}
			if configVolume == "" {
				t.Fatalf("no volume of the %s ConfigMap", gen)
			}
			var configPath string
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					t.Errorf("mount %s names no volume", m.Name)
				}
				if m.Name == configVolume {
					configPath = m.MountPath + "/tollgate.yaml"
				}
			}
			if i := slices.Index(c.Args, "-config"); i < 0 || i+1 == len(c.Args) || c.Args[i+1] != configPath {
				t.Errorf("args %q do not pass -config %s", c.Args, configPath)
			}
		})
	}
}

func gatewayContainer(t *testing.T, objs []object) (podSpec, container) {
	t.Helper()
	var d deploymentSpec
	decodeSpec(t, find(t, objs, "Deployment", "tollgate-gateway"), &d)
	return d.Template.Spec, d.Template.Spec.Containers[0]
}

func port(t *testing.T, c container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("no container port %q", name)
	return 0
}

func env(c container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestGateway(t *testing.T) {
	objs := objects(t)
	pod, c := gatewayContainer(t, objs)
	var d deploymentSpec
	decodeSpec(t, find(t, objs, "Deployment", "tollgate-gateway"), &d)
	podLabels := d.Template.Metadata.Labels

	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"readiness on /readyz", func(t *testing.T) {
			if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port != "http" {
				t.Errorf("readiness probe %+v, want GET /readyz on http", p)
			}
		}},
		{"liveness on /healthz", func(t *testing.T) {
			if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != "http" {
				t.Errorf("liveness probe %+v, want GET /healthz on http", p)
			}
		}},
		{"listen env matches the http port", func(t *testing.T) {
			_, p, err := net.SplitHostPort(env(c, config.ListenEnv))
			if err != nil || p != strconv.Itoa(port(t, c, "http")) {
				t.Errorf("%s=%q, want the http port %d", config.ListenEnv, env(c, config.ListenEnv), port(t, c, "http"))
			}
		}},
		{"admin listen env matches the admin port", func(t *testing.T) {
			_, p, err := net.SplitHostPort(env(c, "TOLLGATE_ADMIN_LISTEN"))
			if err != nil || p != strconv.Itoa(port(t, c, "admin")) {
				t.Errorf("TOLLGATE_ADMIN_LISTEN=%q, want the admin port %d", env(c, "TOLLGATE_ADMIN_LISTEN"), port(t, c, "admin"))
			}
		}},
		{"provider keys from a secret", func(t *testing.T) {
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil && e.SecretRef.Name == "tollgate-provider-keys" && !e.SecretRef.Optional {
					return
				}
			}
			t.Error("no required envFrom secretRef tollgate-provider-keys")
		}},
		{"grace period above shutdown_grace", func(t *testing.T) {
			cfg := loadConfig(t)
			if float64(pod.TerminationGracePeriodSeconds) <= cfg.ShutdownGrace.Seconds() {
				t.Errorf("terminationGracePeriodSeconds %d <= shutdown_grace %v", pod.TerminationGracePeriodSeconds, cfg.ShutdownGrace)
			}
		}},
		{"service selects the gateway pods on named ports", func(t *testing.T) {
			var s struct {
				Selector map[string]string
				Ports    []struct {
					Name       string
					TargetPort string `yaml:"targetPort"`
				}
			}
			decodeSpec(t, find(t, objs, "Service", "tollgate-gateway"), &s)
			if !subset(s.Selector, podLabels) {
				t.Errorf("selector %v does not select %v", s.Selector, podLabels)
			}
			for _, p := range s.Ports {
				port(t, c, p.TargetPort)
			}
		}},
		{"pdb selects the gateway pods", func(t *testing.T) {
			var s struct {
				MaxUnavailable int `yaml:"maxUnavailable"`
				Selector       struct {
					MatchLabels map[string]string `yaml:"matchLabels"`
				}
			}
			decodeSpec(t, find(t, objs, "PodDisruptionBudget", "tollgate-gateway"), &s)
			if !subset(s.Selector.MatchLabels, podLabels) || s.MaxUnavailable < 1 {
				t.Errorf("pdb %+v", s)
			}
		}},
		{"hpa scales the gateway on cpu", func(t *testing.T) {
			var s struct {
				ScaleTargetRef struct{ Kind, Name string } `yaml:"scaleTargetRef"`
				MinReplicas    int                         `yaml:"minReplicas"`
				MaxReplicas    int                         `yaml:"maxReplicas"`
				Metrics        []struct {
					Type     string
					Resource struct{ Name string }
				}
			}
			decodeSpec(t, find(t, objs, "HorizontalPodAutoscaler", "tollgate-gateway"), &s)
			if s.ScaleTargetRef.Kind != "Deployment" || s.ScaleTargetRef.Name != "tollgate-gateway" {
				t.Errorf("scaleTargetRef %+v", s.ScaleTargetRef)
			}
			if s.MinReplicas < 2 || s.MaxReplicas < s.MinReplicas {
				t.Errorf("replicas %d..%d; want at least 2 so the PDB allows a drain", s.MinReplicas, s.MaxReplicas)
			}
			if len(s.Metrics) != 1 || s.Metrics[0].Type != "Resource" || s.Metrics[0].Resource.Name != "cpu" {
				t.Errorf("metrics %+v, want cpu", s.Metrics)
			}
		}},
		{"config files are mounted", func(t *testing.T) {
			cfg := loadConfig(t)
			paths := []string{cfg.Usage.SpoolDir + "/"}
			for _, is := range cfg.Auth.Issuers {
				for _, k := range is.Keys {
					if k.PublicKeyFile != "" {
						paths = append(paths, k.PublicKeyFile)
					}
				}
			}
			for _, p := range paths {
				if !slices.ContainsFunc(c.VolumeMounts, func(m struct {
					Name      string
					MountPath string `yaml:"mountPath"`
				}) bool {
					return strings.HasPrefix(p, m.MountPath+"/")
				}) {
					t.Errorf("%s is on no mounted volume", p)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// loadConfig parses tollgate.yaml as the programs do, with the Secret's
// variables set.
func loadConfig(t *testing.T) *config.Config {
	t.Helper()
	data, err := os.ReadFile("tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data, func(k string) string {
		if strings.HasSuffix(k, "_API_KEY") {
			return "sk-test"
		}
		return ""
	})
	if err != nil {
		t.Fatalf("tollgate.yaml: %v", err)
	}
	return cfg
}

func TestConfigIsValid(t *testing.T) {
	cfg := loadConfig(t)
	_, c := gatewayContainer(t, objects(t))
	_, p, err := net.SplitHostPort(cfg.Listen)
	if err != nil || p != strconv.Itoa(port(t, c, "http")) {
		t.Errorf("listen %q does not match the http container port", cfg.Listen)
	}
	if cfg.NATS.Replicas != 3 {
		t.Errorf("nats.replicas %d, want 3 for the JetStream cluster", cfg.NATS.Replicas)
	}
}
