// Command kubecheck validates Kubernetes manifests (the output of `helm
// template`) without a cluster and without downloading schemas: every
// object is decoded strictly into its Go type from k8s.io/api (or the
// Prometheus Operator's types for a ServiceMonitor), then checked against
// the structured schema of the built-in types that k8s.io/client-go
// carries (generated from the API server's OpenAPI document), then against
// a few rules the API server would enforce (names, labels, selectors,
// references between fields). It is this project's stand-in for
// kubeconform, whose schemas come from the network.
//
// Usage: kubecheck [-extract KEY=DIR] FILE... (each a stream of YAML
// documents); -extract writes each ConfigMap's KEY to DIR/NAME-KEY so that
// the caller can check the file itself (make deploycheck runs
// `geo-sidecar validate` on the rendered config).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

var extract = flag.String("extract", "", "KEY=DIR: write each ConfigMap's KEY to DIR/NAME-KEY")

func main() {
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: kubecheck [-extract KEY=DIR] FILE...")
		os.Exit(2)
	}
	if err := monitoringv1.AddToScheme(scheme.Scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	failed := false
	for _, f := range flag.Args() {
		n, errs := checkFile(f)
		for _, err := range errs {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			failed = true
		}
		fmt.Printf("%s: %d objects, %d problems\n", f, n, len(errs))
	}
	if failed {
		os.Exit(1)
	}
}

func checkFile(path string) (int, []error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, []error{err}
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	types := applyconfigurations.NewTypeConverter(scheme.Scheme)
	var (
		n    int
		errs []error
	)
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, append(errs, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		n++
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", n, err))
			continue
		}
		id := fmt.Sprintf("%s %s", u.GetKind(), u.GetName())
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: strict decoding as %s: %w", id, u.GroupVersionKind(), err))
			continue
		}
		if gvk.Group != "monitoring.coreos.com" {
			if _, err := types.ObjectToTyped(u); err != nil {
				errs = append(errs, fmt.Errorf("%s: schema: %w", id, err))
			}
		}
		for _, e := range rules(obj) {
			errs = append(errs, fmt.Errorf("%s: %s", id, e))
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && *extract != "" {
			key, dir, _ := strings.Cut(*extract, "=")
			if v, ok := cm.Data[key]; ok {
				if err := os.WriteFile(filepath.Join(dir, cm.Name+"-"+key), []byte(v), 0o644); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return n, errs
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// rules are checks the API server makes on create that strict decoding
// does not: names, labels, a selector that selects its own pods, and
// references between fields of a pod.
func rules(obj runtime.Object) []string {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	// meta checks an object's name (named: a pod template has none) and
	// labels.
	meta := func(m metav1.ObjectMeta, named bool) {
		for _, e := range validation.IsDNS1123Subdomain(m.Name) {
			if named {
				add("metadata.name %q: %s", m.Name, e)
			}
		}
		for k, v := range m.Labels {
			for _, e := range validation.IsQualifiedName(k) {
				add("label key %q: %s", k, e)
			}
			for _, e := range validation.IsValidLabelValue(v) {
				add("label %s value %q: %s", k, v, e)
			}
		}
	}
	selects := func(where string, sel *metav1.LabelSelector, podLabels map[string]string) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			add("%s: %v", where, err)
			return
		}
		if s.Empty() {
			add("%s is empty (selects every pod)", where)
		}
		if podLabels != nil && !s.Matches(labels.Set(podLabels)) {
			add("%s %q does not select the pod template's labels %v", where, s, podLabels)
		}
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		meta(o.ObjectMeta, true)
		meta(o.Spec.Template.ObjectMeta, false)
		selects("spec.selector", o.Spec.Selector, o.Spec.Template.Labels)
		for _, e := range podRules(o.Spec.Template.Spec) {
			add("spec.template.spec: %s", e)
		}
	case *policyv1.PodDisruptionBudget:
		meta(o.ObjectMeta, true)
		selects("spec.selector", o.Spec.Selector, nil)
	case *corev1.Service:
		meta(o.ObjectMeta, true)
		if len(o.Spec.Selector) == 0 {
			add("spec.selector is empty")
		}
		for _, p := range o.Spec.Ports {
			for _, e := range validation.IsValidPortName(p.Name) {
				add("port name %q: %s", p.Name, e)
			}
		}
	case *corev1.ConfigMap:
		meta(o.ObjectMeta, true)
		for k := range o.Data {
			for _, e := range validation.IsConfigMapKey(k) {
				add("data key %q: %s", k, e)
			}
		}
	case *corev1.ServiceAccount:
		meta(o.ObjectMeta, true)
	case *monitoringv1.ServiceMonitor:
		meta(o.ObjectMeta, true)
		selects("spec.selector", &o.Spec.Selector, nil)
	default:
		add("kind %T is not one this chart renders: add rules for it to kubecheck", obj)
	}
	return errs
}

func podRules(p corev1.PodSpec) []string {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if p.SecurityContext == nil || p.SecurityContext.RunAsNonRoot == nil || !*p.SecurityContext.RunAsNonRoot {
		add("securityContext.runAsNonRoot is not true")
	}
	volumes := map[string]bool{}
	for _, v := range p.Volumes {
		if volumes[v.Name] {
			add("volume %q twice", v.Name)
		}
		volumes[v.Name] = true
		for _, e := range validation.IsDNS1123Label(v.Name) {
			add("volume name %q: %s", v.Name, e)
		}
	}
	for _, c := range p.Containers {
		ports := map[string]bool{}
		for _, pt := range c.Ports {
			for _, e := range validation.IsValidPortName(pt.Name) {
				add("container %s port name %q: %s", c.Name, pt.Name, e)
			}
			ports[pt.Name] = true
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				add("container %s mounts volume %q, which the pod does not have", c.Name, m.Name)
			}
		}
		for name, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if pr == nil || pr.HTTPGet == nil {
				continue
			}
			if port := pr.HTTPGet.Port; port.StrVal != "" && !ports[port.StrVal] {
				add("container %s %s probe names port %q, which the container does not declare", c.Name, name, port.StrVal)
			}
		}
		if c.Image == "" || strings.HasSuffix(c.Image, ":") {
			add("container %s: image %q has no tag", c.Name, c.Image)
		}
		// What this chart promises (issue 12): non-root, read-only root
		// file system, probes, requests.
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("container %s: root file system not read-only", c.Name)
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("container %s: privilege escalation allowed", c.Name)
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			add("container %s: liveness or readiness probe missing", c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			add("container %s: no CPU or memory request", c.Name)
		}
	}
	return errs
}
