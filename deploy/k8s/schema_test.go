package k8s

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// apiTypes maps apiVersion/kind to the Kubernetes API type it decodes into.
var apiTypes = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

// validate decodes one manifest strictly into its Kubernetes API type (the
// types the API server's OpenAPI schemas are generated from): an unknown or
// misspelt field, a value of the wrong type or an unparsable quantity is an
// error. Fields the API server requires are checked for the kinds we ship.
func validate(doc []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	newObj, ok := apiTypes[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return fmt.Errorf("unknown apiVersion/kind %s/%s", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if o.Spec.Selector == nil {
			return errors.New("spec.selector is required")
		}
		return validatePod(o.Spec.Template.Spec)
	case *appsv1.StatefulSet:
		if o.Spec.Selector == nil {
			return errors.New("spec.selector is required")
		}
		return validatePod(o.Spec.Template.Spec)
	case *corev1.Service:
		for i, p := range o.Spec.Ports {
			if p.Port == 0 {
				return fmt.Errorf("spec.ports[%d].port is required", i)
			}
		}
	case *autoscalingv2.HorizontalPodAutoscaler:
		if o.Spec.MaxReplicas == 0 || o.Spec.ScaleTargetRef.Name == "" {
			return errors.New("spec.maxReplicas and spec.scaleTargetRef are required")
		}
	}
	return nil
}

func validatePod(p corev1.PodSpec) error {
	if len(p.Containers) == 0 {
		return errors.New("spec.template.spec.containers is required")
	}
	for i, c := range p.Containers {
		if c.Name == "" || c.Image == "" {
			return fmt.Errorf("containers[%d]: name and image are required", i)
		}
		for j, port := range c.Ports {
			if port.ContainerPort == 0 {
				return fmt.Errorf("containers[%d].ports[%d].containerPort is required", i, j)
			}
		}
	}
	for i, v := range p.Volumes {
		if v.Name == "" {
			return fmt.Errorf("volumes[%d].name is required", i)
		}
	}
	return nil
}

// documents splits a YAML stream into its documents.
func documents(t *testing.T, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
}

func stripComments(d []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

func TestSchemas(t *testing.T) {
	for _, f := range readKustomization(t).Resources {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documents(t, data) {
			t.Run(fmt.Sprintf("%s#%d", f, i), func(t *testing.T) {
				if err := validate(doc); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestSchemasRejectInvalid shows the check is not a shape check: each
// mistake a hand-edited manifest makes is refused.
func TestSchemasRejectInvalid(t *testing.T) {
	base, err := os.ReadFile("budget-deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, old, new string }{
		{"misspelt field", "livenessProbe:", "livenesProbe:"},
		{"wrong type", "replicas: 2", "replicas: two"},
		{"bad quantity", "cpu: 250m", "cpu: 250mm"},
		{"unknown kind", "kind: Deployment", "kind: Deploymnet"},
		{"field at the wrong level", "      automountServiceAccountToken: false", "      automountServiceAccountToken: false\n      command: [\"/usr/local/bin/budget\"]"},
	}
	if err := validate(base); err != nil {
		t.Fatalf("budget-deployment.yaml: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(base), tc.old, tc.new, 1)
			if bad == string(base) {
				t.Fatalf("%q is not in the manifest", tc.old)
			}
			if err := validate([]byte(bad)); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
