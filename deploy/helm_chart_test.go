package deploy

// The Helm chart (helm/bpfbench): linted and rendered with Helm's own Go
// packages, as `helm lint` and `helm template` do, for the default values
// and two variations; every rendered object is decoded strictly into its
// Kubernetes type (a misspelt field fails), and the DaemonSet is checked
// for the privileges, host access and probes it is meant to have.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/bpfbench/bpfbench/daemon"
)

const (
	chartDir       = "helm/bpfbench"
	chartNamespace = "monitoring"
)

// wantCaps is what the daemon needs and is given, and no more.
var wantCaps = []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"}

// helmCases are the values the chart is linted and rendered with.
var helmCases = []struct {
	name   string
	values string
	kinds  []string // every kind rendered, sorted
}{
	{"default", ``, []string{"ConfigMap", "DaemonSet", "Service", "ServiceAccount"}},
	// The agent API: its sessions may target a pod (run --agent.pod), so the
	// daemon lists its node's pods as for Kubernetes targets.
	// It needs TLS and basic auth; a NetworkPolicy admits the peers listed.
	{"agent-pod-sessions", `
config:
  agent: {enabled: true, max_sessions: 2, allow: {comms: [vllm]}}
webConfig:
  secretName: bpfbench-web
  tls: true
  basicAuth: true
networkPolicy:
  enabled: true
  from:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: monitoring}
    - ipBlock: {cidr: 10.0.0.0/8}
`, []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "NetworkPolicy", "Service", "ServiceAccount"}},
	{"servicemonitor-k8s-targets", `
serviceMonitor:
  enabled: true
  labels: {release: kube-prometheus-stack}
  interval: 15s
  metricRelabelings:
    - {action: labeldrop, regex: uuid}
config:
  refresh_interval: 10s
  kubernetes: {refresh_interval: 30s}
  targets:
    - name: vllm
      namespace: inference
      pod_labels: {app.kubernetes.io/name: vllm}
      container: vllm
      max_pods: 8
    - name: tokenizers
      comm: tokenizer
nodeSelector: {nvidia.com/gpu.present: "true"}
priorityClassName: system-node-critical
`, []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Service", "ServiceAccount", "ServiceMonitor"}},
	{"podmonitor-tls-resources", `
podMonitor:
  enabled: true
  tlsConfig: {insecureSkipVerify: true}
service:
  enabled: false
webConfig:
  secretName: bpfbench-web
  tls: true
resources:
  requests: {cpu: 250m, memory: 256Mi}
  limits: {cpu: "2", memory: 1Gi}
gpu:
  runtimeClassName: nvidia
serviceAccount:
  create: false
  name: observability
image:
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
`, []string{"ConfigMap", "DaemonSet", "PodMonitor"}},
}

func helmValues(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(s))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return v.AsMap()
}

// renderChart is `helm template --namespace monitoring bpfbench helm/bpfbench`:
// the rendered manifests by template name, NOTES.txt included.
func renderChart(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	opts := chartutil.ReleaseOptions{Name: "bpfbench", Namespace: chartNamespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

// decodeStrict decodes one YAML document into out as the API server
// does with fieldValidation=Strict: field names are case-sensitive
// (encoding/json would take hostPid for hostPID), and a duplicate key or a
// field out's type does not have is an error.
func decodeStrict(doc []byte, out any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, out)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// object is one rendered manifest decoded into its type.
type object struct {
	file, kind, name string
	raw              []byte
	obj              any
}

func typed(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, nil
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1/PodMonitor":
		return &monitoringv1.PodMonitor{}, nil
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	}
	return nil, fmt.Errorf("no type known for %s %s: add it to the test", apiVersion, kind)
}

// decodeManifests decodes every document of the rendered templates.
func decodeManifests(t *testing.T, rendered map[string]string) []object {
	t.Helper()
	var files []string
	for f := range rendered {
		files = append(files, f)
	}
	sort.Strings(files)
	var out []object
	for _, f := range files {
		if !strings.HasSuffix(f, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(rendered[f], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v\n%s", f, err, doc)
			}
			obj, err := typed(head.APIVersion, head.Kind)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := decodeStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", f, head.Kind, head.Metadata.Name, err, doc)
			}
			clusterScoped := strings.HasPrefix(head.Kind, "Cluster")
			if !clusterScoped && head.Metadata.Namespace != chartNamespace {
				t.Errorf("%s: %s %s in namespace %q, want the release's %q", f, head.Kind, head.Metadata.Name, head.Metadata.Namespace, chartNamespace)
			}
			out = append(out, object{f, head.Kind, head.Metadata.Name, []byte(doc), obj})
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestHelmLint(t *testing.T) {
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			l := lint.All(chartDir, helmValues(t, c.values), chartNamespace, false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %v", m)
				} else {
					t.Logf("helm lint: %v", m)
				}
			}
		})
	}
}

func TestHelmTemplate(t *testing.T) {
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			rendered, err := renderChart(t, helmValues(t, c.values))
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			if notes := rendered["bpfbench/templates/NOTES.txt"]; !strings.Contains(notes, "CAP_") && !strings.Contains(notes, "BPF, PERFMON") {
				t.Errorf("NOTES.txt does not name the capabilities:\n%s", notes)
			}
			objs := decodeManifests(t, rendered)
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.kind)
			}
			sort.Strings(kinds)
			if !slices.Equal(kinds, c.kinds) {
				t.Errorf("rendered %v, want %v", kinds, c.kinds)
			}
			for _, o := range objs {
				switch v := o.obj.(type) {
				case *appsv1.DaemonSet:
					checkDaemonSet(t, c.name, o.raw, v)
				case *corev1.ConfigMap:
					checkConfigMap(t, c.name, v)
				case *networkingv1.NetworkPolicy:
					checkNetworkPolicy(t, v)
				case *rbacv1.ClusterRole:
					if len(v.Rules) != 1 || !slices.Equal(v.Rules[0].Resources, []string{"pods"}) || !slices.Equal(v.Rules[0].Verbs, []string{"list"}) {
						t.Errorf("ClusterRole rules %+v, want list on pods only", v.Rules)
					}
				case *monitoringv1.ServiceMonitor:
					ep := v.Spec.Endpoints
					if len(ep) != 1 || ep[0].Port != "metrics" || ep[0].Path != "/metrics" || string(*ep[0].Scheme) != "http" || string(ep[0].Interval) != "15s" || len(ep[0].MetricRelabelConfigs) != 1 {
						t.Errorf("ServiceMonitor endpoints %+v", ep)
					}
				case *monitoringv1.PodMonitor:
					ep := v.Spec.PodMetricsEndpoints
					if len(ep) != 1 || ep[0].Port == nil || *ep[0].Port != "metrics" || string(*ep[0].Scheme) != "https" || ep[0].TLSConfig == nil || ep[0].TLSConfig.InsecureSkipVerify == nil || !*ep[0].TLSConfig.InsecureSkipVerify {
						t.Errorf("PodMonitor endpoints %+v", ep)
					}
				}
			}
		})
	}
}

func checkDaemonSet(t *testing.T, name string, raw []byte, ds *appsv1.DaemonSet) {
	t.Helper()
	if bytes.Contains(raw, []byte("privileged: true")) {
		t.Errorf("the DaemonSet holds privileged: true")
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("hostPID is not set: the daemon would see only its own processes")
	}
	if spec.HostNetwork || spec.HostIPC {
		t.Error("hostNetwork or hostIPC set: the daemon needs neither")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no container securityContext with capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged is not false")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities dropped %v, want [ALL]", sc.Capabilities.Drop)
	}
	if !slices.Equal(sc.Capabilities.Add, wantCaps) {
		t.Errorf("capabilities added %v, want exactly %v", sc.Capabilities.Add, wantCaps)
	}
	if c.Command[0] != "/usr/local/bin/bpfbench" || c.Args[0] != "daemon" || !slices.Contains(c.Args, "--config=/etc/bpfbench/config.yaml") {
		t.Errorf("command %v args %v", c.Command, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("ports %+v", c.Ports)
	}
	scheme := corev1.URISchemeHTTP
	if name == "agent-pod-sessions" {
		// Basic auth: the probes cannot send it, so liveness is a TCP
		// check and readiness is not probed.
		if !slices.Contains(c.Args, "--web.config.file=/etc/bpfbench/web/web-config.yml") {
			t.Errorf("args %v: no web config file for the agent", c.Args)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.TCPSocket == nil || c.ReadinessProbe != nil {
			t.Errorf("probes %+v %+v, want a TCP liveness check alone", c.LivenessProbe, c.ReadinessProbe)
		}
	}
	if name == "podmonitor-tls-resources" {
		scheme = corev1.URISchemeHTTPS
		if !slices.Contains(c.Args, "--web.config.file=/etc/bpfbench/web/web-config.yml") {
			t.Errorf("args %v: no web config file", c.Args)
		}
		if got := c.Resources.Limits.Cpu().String(); got != "2" {
			t.Errorf("cpu limit %s, want 2", got)
		}
		if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
			t.Errorf("runtimeClassName %v, want nvidia", spec.RuntimeClassName)
		}
		if spec.ServiceAccountName != "observability" || !strings.HasSuffix(c.Image, "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") {
			t.Errorf("service account %s, image %s", spec.ServiceAccountName, c.Image)
		}
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/-/healthy", c.ReadinessProbe: "/-/ready"} {
		if name == "agent-pod-sessions" {
			break
		}
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "metrics" || probe.HTTPGet.Scheme != scheme {
			t.Errorf("probe %+v, want GET %s on metrics over %s", probe, path, scheme)
		}
	}
	var nodeName bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("NODE_NAME is not set from spec.nodeName")
	}
	// Every host path is one the daemon reads, mounted read-only.
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	wantPaths := map[string]string{"btf": "/sys/kernel/btf", "tracefs": "/sys/kernel/tracing", "bpffs": "/sys/fs/bpf"}
	if fmt.Sprint(hostPaths) != fmt.Sprint(wantPaths) {
		t.Errorf("host paths %v, want %v", hostPaths, wantPaths)
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("volume %s mounted writable at %s", m.Name, m.MountPath)
		}
		if p, ok := hostPaths[m.Name]; ok && p != m.MountPath {
			t.Errorf("host path %s mounted at %s", p, m.MountPath)
		}
	}
	listsPods := name == "servicemonitor-k8s-targets" || name == "agent-pod-sessions"
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken != listsPods {
		t.Errorf("automountServiceAccountToken %v, want %v (only Kubernetes targets and the agent's pod sessions list pods)", spec.AutomountServiceAccountToken, listsPods)
	}
	if len(spec.Tolerations) == 0 {
		t.Error("no tolerations: tainted GPU nodes would go unobserved")
	}
}

func checkConfigMap(t *testing.T, name string, cm *corev1.ConfigMap) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := daemon.LoadConfig(p)
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	if cfg.ListenAddress != ":9464" || cfg.LogFormat != "json" {
		t.Errorf("config %+v", cfg)
	}
	if name == "agent-pod-sessions" && (!cfg.Agent.Enabled || cfg.Agent.MaxSessions != 2 || !slices.Equal(cfg.Agent.Allow.Comms, []string{"vllm"})) {
		t.Errorf("agent %+v, want enabled with 2 sessions", cfg.Agent)
	}
	if name == "servicemonitor-k8s-targets" {
		if len(cfg.Targets) != 2 || !cfg.Targets[0].Kubernetes() || cfg.Targets[0].PodLabels["app.kubernetes.io/name"] != "vllm" || cfg.Targets[0].PodLimit() != 8 || cfg.Targets[1].Comm != "tokenizer" {
			t.Errorf("targets %+v", cfg.Targets)
		}
	}
}

// The NetworkPolicy selects the daemon's pods and admits the peers listed
// to its port alone.
func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	sel := np.Spec.PodSelector.MatchLabels
	if sel["app.kubernetes.io/name"] != "bpfbench" || sel["app.kubernetes.io/instance"] != "bpfbench" {
		t.Errorf("NetworkPolicy selects %v, not the daemon's pods", sel)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 1 {
		t.Fatalf("NetworkPolicy %+v, want one ingress rule", np.Spec)
	}
	in := np.Spec.Ingress[0]
	if len(in.Ports) != 1 || in.Ports[0].Port == nil || in.Ports[0].Port.String() != "metrics" {
		t.Errorf("NetworkPolicy ports %+v, want the metrics port alone", in.Ports)
	}
	if len(in.From) != 2 || in.From[0].NamespaceSelector == nil || in.From[1].IPBlock == nil || in.From[1].IPBlock.CIDR != "10.0.0.0/8" {
		t.Errorf("NetworkPolicy from %+v, want the two peers of the values", in.From)
	}
}

// The strict decoding the test relies on does catch a misspelt field.
func TestHelmDecodeStrictCatchesTypos(t *testing.T) {
	rendered, err := renderChart(t, helmValues(t, ``))
	if err != nil {
		t.Fatal(err)
	}
	ds := rendered["bpfbench/templates/daemonset.yaml"]
	for from, to := range map[string]string{
		"hostPID: true":          "hostPid: true",
		"readOnlyRootFilesystem": "readOnlyRootFileSystem",
		"      hostPID: true":    "      hostPID: true\n      hostPID: true",
	} {
		bad := strings.Replace(ds, from, to, 1)
		if bad == ds {
			t.Fatalf("%q not in the DaemonSet", from)
		}
		if err := decodeStrict([]byte(bad), &appsv1.DaemonSet{}); err == nil {
			t.Errorf("%q for %q decoded without error", to, from)
		}
	}
}

func TestHelmTemplateRefuses(t *testing.T) {
	for values, want := range map[string]string{
		"serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}\n": "not both",
		"serviceMonitor: {enabled: true}\nservice: {enabled: false}\n":   "needs service.enabled",
		// The session API needs TLS and authentication.
		"config: {agent: {enabled: true}}\n":                                                "needs webConfig.secretName",
		"config: {agent: {enabled: true}}\nwebConfig: {secretName: web, basicAuth: true}\n": "needs webConfig.tls",
		"networkPolicy: {enabled: true}\n":                                                  "needs networkPolicy.from",
	} {
		if _, err := renderChart(t, helmValues(t, values)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: %v, want an error saying %q", values, err, want)
		}
	}
	// A capability beyond the four is added, once; SYS_ADMIN (which the
	// API refuses with allowPrivilegeEscalation: false) lifts that too.
	rendered, err := renderChart(t, helmValues(t, "extraCapabilities: [CAP_SYS_ADMIN, BPF]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := decodeStrict([]byte(rendered["bpfbench/templates/daemonset.yaml"]), &ds); err != nil {
		t.Fatal(err)
	}
	sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	if want := append(slices.Clone(wantCaps), "SYS_ADMIN"); !slices.Equal(sc.Capabilities.Add, want) || !*sc.AllowPrivilegeEscalation || *sc.Privileged {
		t.Errorf("extra capabilities: add %v, allowPrivilegeEscalation %v, privileged %v; want %v, true, false", sc.Capabilities.Add, *sc.AllowPrivilegeEscalation, *sc.Privileged, want)
	}
}
