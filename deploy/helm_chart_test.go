package deploy

// The Helm chart (helm/bpfbench): linted and rendered with Helm's own Go
// packages, as `helm lint --strict` and `helm template` do, for the default
// values, variations and one with every option on; every rendered object
// is decoded strictly into its Kubernetes type (a misspelt field fails),
// the DaemonSet is checked for the privileges, host access and probes it is
// meant to have, every namespaced object for its namespace, the chart's
// copies of the dashboard and rules against deploy/'s, and the chart's
// README for a row per key of values.yaml.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
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
	// The namespace of the case with every option on (namespaceOverride).
	overrideNamespace = "observability"
)

// wantCaps is what the daemon needs and is given, and no more.
var wantCaps = []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"}

// helmCases are the values the chart is linted and rendered with.
var helmCases = []struct {
	name   string
	values string
	kinds  []string // every kind rendered, sorted
}{
	// Every template rendered, every extension point set (podMonitor, the
	// alternative to serviceMonitor, is in podmonitor-tls-resources).
	{everyOption, everyOptionValues, []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "DaemonSet",
		"NetworkPolicy", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"}},
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

const everyOption = "every-option"

const everyOptionValues = `
namespaceOverride: ` + overrideNamespace + `
nameOverride: bpfbench
imagePullSecrets: [{name: registry}]
config:
  agent: {enabled: true, allow: {targets: [vllm]}}
  targets:
    - {name: vllm, namespace: inference, container: vllm}
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
extraArgs: [--log.level=debug, --cpus=0-3]
extraEnv:
  - {name: GODEBUG, value: madvdontneed=1}
  - name: POD_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.name}}
extraVolumes:
  - {name: client-ca, configMap: {name: client-ca}}
extraVolumeMounts:
  - {name: client-ca, mountPath: /etc/bpfbench/client-ca, readOnly: true}
priorityClassName: system-node-critical
podAnnotations: {example.com/team: inference}
podLabels: {team: inference}
nodeSelector: {nvidia.com/gpu.present: "true"}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]
appArmorProfile: {type: RuntimeDefault}
gpu: {runtimeClassName: nvidia}
serviceAccount:
  annotations: {example.com/owner: sre}
service:
  annotations: {example.com/scrape: "false"}
serviceMonitor:
  enabled: true
  labels: {release: kube-prometheus-stack}
  interval: 15s
  scrapeTimeout: 10s
  tlsConfig: {insecureSkipVerify: true}
  basicAuth:
    username: {name: bpfbench-scrape, key: username}
    password: {name: bpfbench-scrape, key: password}
  relabelings:
    - {action: replace, targetLabel: cluster, replacement: gpu-a}
  metricRelabelings:
    - {action: labeldrop, regex: uuid}
prometheusRule:
  enabled: true
  additionalLabels: {release: kube-prometheus-stack}
  annotations: {example.com/owner: sre}
dashboards:
  enabled: true
  additionalLabels: {team: inference}
  annotations: {grafana_folder: bpfbench}
`

// caseNamespace is where a case's namespaced objects belong.
func caseNamespace(name string) string {
	if name == everyOption {
		return overrideNamespace
	}
	return chartNamespace
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
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("no type known for %s %s: add it to the test", apiVersion, kind)
}

// decodeManifests decodes every document of the rendered templates and
// checks that each namespaced one is in namespace.
func decodeManifests(t *testing.T, rendered map[string]string, namespace string) []object {
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
			if !clusterScoped && head.Metadata.Namespace != namespace {
				t.Errorf("%s: %s %s in namespace %q, want %q", f, head.Kind, head.Metadata.Name, head.Metadata.Namespace, namespace)
			}
			if clusterScoped && head.Metadata.Namespace != "" {
				t.Errorf("%s: %s %s is cluster-scoped but has namespace %q", f, head.Kind, head.Metadata.Name, head.Metadata.Namespace)
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

// TestHelmLint is `helm lint --strict`: what action.Lint with Strict does
// (lint's rules, then every warning an error), without the action package
// (and the Kubernetes client it pulls in).
func TestHelmLint(t *testing.T) {
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, helmValues(t, c.values), caseNamespace(c.name), nil)
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
			notes := rendered["bpfbench/templates/NOTES.txt"]
			if !strings.Contains(notes, "CAP_") && !strings.Contains(notes, "BPF, PERFMON") {
				t.Errorf("NOTES.txt does not name the capabilities:\n%s", notes)
			}
			checkNotes(t, c.name, notes)
			ns := caseNamespace(c.name)
			objs := decodeManifests(t, rendered, ns)
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
					if strings.HasSuffix(v.Name, "-dashboard") {
						checkDashboardConfigMap(t, v)
					} else {
						checkConfigMap(t, c.name, v)
					}
				case *monitoringv1.PrometheusRule:
					checkPrometheusRule(t, v)
				case *rbacv1.ClusterRoleBinding:
					if len(v.Subjects) != 1 || v.Subjects[0].Namespace != ns {
						t.Errorf("ClusterRoleBinding subjects %+v, want the service account in %s", v.Subjects, ns)
					}
				case *networkingv1.NetworkPolicy:
					checkNetworkPolicy(t, v)
				case *rbacv1.ClusterRole:
					if len(v.Rules) != 1 || !slices.Equal(v.Rules[0].Resources, []string{"pods"}) || !slices.Equal(v.Rules[0].Verbs, []string{"list"}) {
						t.Errorf("ClusterRole rules %+v, want list on pods only", v.Rules)
					}
				case *monitoringv1.ServiceMonitor:
					ep := v.Spec.Endpoints
					scheme := map[bool]string{false: "http", true: "https"}[c.name == everyOption]
					if len(ep) != 1 || ep[0].Port != "metrics" || ep[0].Path != "/metrics" || string(*ep[0].Scheme) != scheme || string(ep[0].Interval) != "15s" || len(ep[0].MetricRelabelConfigs) != 1 {
						t.Errorf("ServiceMonitor endpoints %+v", ep)
					}
					if !slices.Equal(v.Spec.NamespaceSelector.MatchNames, []string{ns}) {
						t.Errorf("ServiceMonitor selects namespaces %v, want [%s]", v.Spec.NamespaceSelector.MatchNames, ns)
					}
				case *monitoringv1.PodMonitor:
					if !slices.Equal(v.Spec.NamespaceSelector.MatchNames, []string{ns}) {
						t.Errorf("PodMonitor selects namespaces %v, want [%s]", v.Spec.NamespaceSelector.MatchNames, ns)
					}
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
	checkSecurityContext(t, spec, c)
	checkCommandAndProbes(t, name, spec, c)
	checkEnvAndMounts(t, spec, c)
	listsPods := name == "servicemonitor-k8s-targets" || name == "agent-pod-sessions" || name == everyOption
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken != listsPods {
		t.Errorf("automountServiceAccountToken %v, want %v (only Kubernetes targets and the agent's pod sessions list pods)", spec.AutomountServiceAccountToken, listsPods)
	}
	if len(spec.Tolerations) == 0 {
		t.Error("no tolerations: tainted GPU nodes would go unobserved")
	}
	if name == everyOption {
		checkExtensionPoints(t, ds)
	}
}

// checkSecurityContext holds the daemon's container to the capabilities it
// needs and no more: not privileged, root with the added capabilities
// only, read-only root, RuntimeDefault seccomp, the default procMount.
func checkSecurityContext(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
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
	// Root in the container, by design: the runtime gives the added
	// capabilities to uid 0 only (Kubernetes has no ambient capabilities),
	// so runAsNonRoot is false and stated, not left to the image.
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsGroup == nil || *sc.RunAsGroup != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Errorf("runAsUser %v, runAsGroup %v, runAsNonRoot %v; want 0, 0, false", sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v, want seccompProfile RuntimeDefault", psc)
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the container's seccompProfile %+v overrides the pod's RuntimeDefault", sc.SeccompProfile)
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		t.Errorf("procMount %v, want Default", *sc.ProcMount)
	}
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		t.Error("shareProcessNamespace set: hostPID is what the daemon needs")
	}
}

// checkCommandAndProbes checks the daemon's command, port and probes (a
// TCP liveness check alone behind basic auth, HTTPS with TLS), and the
// podmonitor-tls-resources values.
func checkCommandAndProbes(t *testing.T, name string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if c.Command[0] != "/usr/local/bin/bpfbench" || c.Args[0] != "daemon" || !slices.Contains(c.Args, "--config=/etc/bpfbench/config.yaml") {
		t.Errorf("command %v args %v", c.Command, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("ports %+v", c.Ports)
	}
	scheme := corev1.URISchemeHTTP
	basicAuth := name == "agent-pod-sessions" || name == everyOption
	if basicAuth {
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
		if basicAuth {
			break
		}
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "metrics" || probe.HTTPGet.Scheme != scheme {
			t.Errorf("probe %+v, want GET %s on metrics over %s", probe, path, scheme)
		}
	}
}

// checkEnvAndMounts checks NODE_NAME and that every host path is one the
// daemon reads, mounted read-only, but the incident spool it writes.
func checkEnvAndMounts(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
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
	wantPaths := map[string]string{"btf": "/sys/kernel/btf", "tracefs": "/sys/kernel/tracing", "bpffs": "/sys/fs/bpf", "incidents": "/var/lib/bpfbench/incidents"}
	if fmt.Sprint(hostPaths) != fmt.Sprint(wantPaths) {
		t.Errorf("host paths %v, want %v", hostPaths, wantPaths)
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly && m.Name != "incidents" {
			t.Errorf("volume %s mounted writable at %s", m.Name, m.MountPath)
		}
		if p, ok := hostPaths[m.Name]; ok && p != m.MountPath {
			t.Errorf("host path %s mounted at %s", p, m.MountPath)
		}
	}
}

// checkExtensionPoints checks every-option's values reached the DaemonSet:
// extra flags after the chart's, extra variables after the chart's, the
// extra volume mounted, and the pod's scheduling fields.
func checkExtensionPoints(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	wantArgs := []string{"daemon", "--config=/etc/bpfbench/config.yaml", "--web.config.file=/etc/bpfbench/web/web-config.yml", "--log.level=debug", "--cpus=0-3"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %v, want %v", c.Args, wantArgs)
	}
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name)
	}
	if want := []string{"NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "GODEBUG", "POD_NAME"}; !slices.Equal(env, want) {
		t.Errorf("env %v, want %v", env, want)
	}
	if e := c.Env[len(c.Env)-1]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("extraEnv's POD_NAME %+v, want it from metadata.name", e)
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "client-ca" })
	if i < 0 || spec.Volumes[i].ConfigMap == nil || spec.Volumes[i].ConfigMap.Name != "client-ca" {
		t.Errorf("volumes %+v: no client-ca from extraVolumes", spec.Volumes)
	}
	j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "client-ca" })
	if j < 0 || c.VolumeMounts[j].MountPath != "/etc/bpfbench/client-ca" {
		t.Errorf("volume mounts %+v: no client-ca from extraVolumeMounts", c.VolumeMounts)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("imagePullSecrets %+v", spec.ImagePullSecrets)
	}
	if spec.NodeSelector["nvidia.com/gpu.present"] != "true" || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		t.Errorf("nodeSelector %v, affinity %+v", spec.NodeSelector, spec.Affinity)
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v, want nvidia", spec.RuntimeClassName)
	}
	if p := spec.SecurityContext.AppArmorProfile; p == nil || p.Type != corev1.AppArmorProfileTypeRuntimeDefault {
		t.Errorf("appArmorProfile %+v, want RuntimeDefault", p)
	}
	meta := ds.Spec.Template.ObjectMeta
	if meta.Labels["team"] != "inference" || meta.Annotations["example.com/team"] != "inference" || meta.Annotations["checksum/config"] == "" {
		t.Errorf("pod labels %v, annotations %v", meta.Labels, meta.Annotations)
	}
	// The selector stays the chart's: podLabels may not change it (it is
	// immutable once installed).
	if sel := ds.Spec.Selector.MatchLabels; len(sel) != 2 || sel["team"] != "" {
		t.Errorf("selector %v, want the chart's two labels", sel)
	}
}

// checkNotes checks NOTES.txt says how the agent's port is protected.
func checkNotes(t *testing.T, name, notes string) {
	t.Helper()
	for _, want := range []string{"Security:", "webConfig.tls", "--agent.insecure"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt does not say %q:\n%s", want, notes)
		}
	}
	switch name {
	case "default":
		if !strings.Contains(notes, "Agent: off") || !strings.Contains(notes, "NetworkPolicy: none") {
			t.Errorf("NOTES.txt for the default values:\n%s", notes)
		}
	case everyOption, "agent-pod-sessions":
		if !strings.Contains(notes, "Agent: on, over TLS (Secret bpfbench-web)") || !strings.Contains(notes, "only the peers of networkPolicy.from reach port 9464") {
			t.Errorf("NOTES.txt for the agent behind a NetworkPolicy:\n%s", notes)
		}
	}
	if name == everyOption && (!strings.Contains(notes, "PrometheusRule bpfbench") || !strings.Contains(notes, "grafana_dashboard=1") || !strings.Contains(notes, "-n "+overrideNamespace+" ")) {
		t.Errorf("NOTES.txt does not name the rules, the dashboard and the namespace:\n%s", notes)
	}
}

// The chart's copies of deploy/'s dashboard and rules (TestHelmChartCopies
// compares them with the originals).
var (
	chartDashboardFile = filepath.Join(chartDir, "files", "bpfbench.json")
	chartRulesFile     = filepath.Join(chartDir, "files", "rules.yml")
)

// The dashboard's ConfigMap carries the dashboard as it is, labelled for the
// Grafana chart's sidecar.
func checkDashboardConfigMap(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	want, err := os.ReadFile(chartDashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["bpfbench.json"]; got != strings.TrimRight(string(want), "\n") {
		t.Errorf("the dashboard ConfigMap's bpfbench.json (%d bytes) differs from %s (%d bytes)", len(got), chartDashboardFile, len(want))
	}
	if !json.Valid([]byte(cm.Data["bpfbench.json"])) {
		t.Error("the dashboard ConfigMap's bpfbench.json is not JSON")
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Labels["team"] != "inference" || cm.Annotations["grafana_folder"] != "bpfbench" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
}

// The PrometheusRule carries the rules' groups, rule for rule, with
// job="bpfbench" as the monitors' job (the chart's name, here bpfbench).
func checkPrometheusRule(t *testing.T, pr *monitoringv1.PrometheusRule) {
	t.Helper()
	b, err := os.ReadFile(chartRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := decodeStrict(b, &want); err != nil {
		t.Fatalf("%s as a PrometheusRule's spec: %v", chartRulesFile, err)
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(pr.Spec, want) {
		t.Errorf("the PrometheusRule's spec differs from %s", chartRulesFile)
	}
	if pr.Labels["release"] != "kube-prometheus-stack" || pr.Annotations["example.com/owner"] != "sre" {
		t.Errorf("PrometheusRule labels %v, annotations %v", pr.Labels, pr.Annotations)
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
		// The chart's extension points do not reopen what it refuses.
		"extraArgs: [--agent.insecure]\n":      "--agent.insecure",
		"extraArgs: [--agent.insecure=true]\n": "--agent.insecure",
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

// The chart's copies of the dashboard and the rules (a chart reads no file
// outside its directory) are deploy/'s, byte for byte.
func TestHelmChartCopies(t *testing.T) {
	for copyPath, orig := range map[string]string{chartRulesFile: rulesFile, chartDashboardFile: dashboardFile} {
		want, err := os.ReadFile(orig)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(copyPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: run go generate ./deploy (it copies them) and commit both", copyPath, orig)
		}
	}
}

// The PrometheusRule's rules select the monitors' job, the chart's name.
func TestHelmPrometheusRuleJob(t *testing.T) {
	rendered, err := renderChart(t, helmValues(t, "prometheusRule: {enabled: true}\nnameOverride: gpu-probe\n"))
	if err != nil {
		t.Fatal(err)
	}
	var pr monitoringv1.PrometheusRule
	if err := decodeStrict([]byte(rendered["bpfbench/templates/prometheusrule.yaml"]), &pr); err != nil {
		t.Fatal(err)
	}
	var down string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if strings.Contains(r.Expr.String(), `job="bpfbench"`) {
				t.Errorf("rule %s%s still selects job=\"bpfbench\": %s", r.Record, r.Alert, r.Expr.String())
			}
			if r.Alert == "BpfbenchDaemonDown" {
				down = r.Expr.String()
			}
		}
	}
	if !strings.Contains(down, `up{job="gpu-probe"}`) {
		t.Errorf("BpfbenchDaemonDown: %q, want it on job gpu-probe", down)
	}
}

// valuesKeyDepth is how deep the chart's README lists values.yaml's keys:
// image.tag is a row, resources.requests.cpu is resources.requests's.
const valuesKeyDepth = 2

// Every key of values.yaml (to valuesKeyDepth) has a row in the chart's
// README table, with its type and default, and every row names a key.
func TestHelmValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	type row struct{ typ, def string }
	want := map[string]row{}
	var walk func(m map[string]any, prefix string, depth int)
	walk = func(m map[string]any, prefix string, depth int) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 && depth < valuesKeyDepth {
				walk(sub, prefix+k+".", depth+1)
				continue
			}
			def, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			want[prefix+k] = row{valueType(v), string(def)}
		}
	}
	walk(values, "", 1)

	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]row{}
	for _, l := range strings.Split(string(readme), "\n") {
		m := valuesRowRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if _, dup := got[m[1]]; dup {
			t.Errorf("README: two rows for %s", m[1])
		}
		if strings.TrimSpace(m[4]) == "" {
			t.Errorf("README: %s has no description", m[1])
		}
		got[m[1]] = row{m[2], m[3]}
	}
	if len(got) == 0 {
		t.Fatal("README: no | Key | Type | Default | Description | rows")
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("README: values.yaml's %s (%s, default %s) has no row", k, w.typ, w.def)
		case g != w:
			t.Errorf("README: %s is %s, default %s; values.yaml has %s, default %s", k, g.typ, g.def, w.typ, w.def)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("README: a row for %s, which values.yaml does not have (to %d levels)", k, valuesKeyDepth)
		}
	}
}

// valuesRowRE is a row of the values table: | `key` | type | `default` | description |.
var valuesRowRE = regexp.MustCompile("^\\| `([A-Za-z0-9_.]+)` \\| (\\w+) \\| `(.*)` \\| (.*)\\|$")

func valueType(v any) string {
	switch v := v.(type) {
	case bool:
		return "bool"
	case float64:
		if v == float64(int64(v)) {
			return "int"
		}
		return "float"
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return "null"
}
