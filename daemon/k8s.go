package daemon

// Kubernetes targets. A target with namespace, pod_labels or container
// selectors follows the processes of the matching containers of the pods
// on this node. A process's container is read from its cgroup path
// (/proc/PID/cgroup), which carries the container id under either cgroup
// driver:
//
//	systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope
//	cgroupfs: /kubepods/burstable/pod<UID>/<ID>
//
// (with a private cgroup namespace the path starts with /../.. instead;
// only its tail is read). The pods' namespaces, names, labels and
// container names come from the API server: the pods of this node
// (GET /api/v1/pods?fieldSelector=spec.nodeName=NODE), listed with the
// service account's token every refresh and decoded into k8s.io/api's
// types with plain net/http (client-go would double the binary). A failed
// list is logged and the last good one is kept.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The service account's files in every pod that mounts its token.
const (
	serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	serviceAccountCA    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// PodContainer names one container of one pod: the namespace, pod and
// container labels of its slot's series (slots.go).
type PodContainer struct {
	Namespace, Pod, Container string
}

type podContainer struct {
	PodContainer
	labels map[string]string
}

// PodIndex is the containers of this node's pods by container id.
type PodIndex struct {
	byID map[string]podContainer
	// pods maps NAMESPACE/POD to the names of its containers (those not
	// started too) and their ids ("" until started).
	pods map[string]map[string]string
}

// NewPodIndex indexes the containers of pods by their container id (the
// id without its runtime:// scheme). Containers not started yet have none.
func NewPodIndex(pods []corev1.Pod) *PodIndex {
	ix := &PodIndex{byID: map[string]podContainer{}, pods: map[string]map[string]string{}}
	for _, p := range pods {
		names := map[string]string{}
		for _, c := range p.Spec.Containers {
			names[c.Name] = ""
		}
		// The pod's own containers (not its init or ephemeral ones) are
		// what a pod target follows.
		for _, cs := range p.Status.ContainerStatuses {
			id := cs.ContainerID
			if i := strings.Index(id, "://"); i >= 0 {
				id = id[i+3:]
			}
			names[cs.Name] = id
		}
		ix.pods[p.Namespace+"/"+p.Name] = names
		for _, statuses := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
			for _, cs := range statuses {
				id := cs.ContainerID
				if i := strings.Index(id, "://"); i >= 0 {
					id = id[i+3:]
				}
				if id == "" {
					continue
				}
				ix.byID[id] = podContainer{PodContainer{p.Namespace, p.Name, cs.Name}, p.Labels}
			}
		}
	}
	return ix
}

// Len is the number of containers indexed.
func (ix *PodIndex) Len() int {
	if ix == nil {
		return 0
	}
	return len(ix.byID)
}

func (ix *PodIndex) lookup(id string) (podContainer, bool) {
	if ix == nil || id == "" {
		return podContainer{}, false
	}
	pc, ok := ix.byID[id]
	return pc, ok
}

// matches reports whether a pod's container meets every selector t sets.
func (t Target) matches(pc podContainer) bool {
	if t.Namespace != "" && pc.Namespace != t.Namespace {
		return false
	}
	if t.Container != "" && pc.Container != t.Container {
		return false
	}
	for k, v := range t.PodLabels {
		if got, ok := pc.labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// A container's cgroup: the runtime's scope (cri-containerd-, crio-,
// docker-) or the bare id (cgroupfs driver), 64 hex digits. crio-conmon-
// scopes hold the runtime's monitor, not the container, and do not match.
var (
	containerCgroupRE = regexp.MustCompile(`^(?:cri-containerd-|crio-|docker-)?([0-9a-f]{64})(?:\.scope)?$`)
	podCgroupRE       = regexp.MustCompile(`^(?:kubepods-(?:besteffort-|burstable-)?)?pod([0-9a-f_-]+)(?:\.slice)?$`)
)

// ContainerID returns the pod UID and container id in a cgroup path of
// a Kubernetes container (either cgroup driver), and false for any other
// path. The UID is as the path writes it (the systemd driver turns its
// dashes into underscores); the id is what the pod's status reports
// after the runtime's scheme.
func ContainerID(cgroup string) (podUID, id string, ok bool) {
	parts := strings.Split(cgroup, "/")
	// Containers may nest cgroups of their own: the container's is the
	// innermost one whose parent is a pod's.
	for i := len(parts) - 1; i > 0; i-- {
		m := containerCgroupRE.FindStringSubmatch(parts[i])
		if m == nil {
			continue
		}
		p := podCgroupRE.FindStringSubmatch(parts[i-1])
		if p == nil {
			continue
		}
		return strings.ReplaceAll(p[1], "_", "-"), m[1], true
	}
	return "", "", false
}

// containerOf returns the container id in any of a process's cgroup paths.
func containerOf(cgroups []string) string {
	for _, cg := range cgroups {
		if _, id, ok := ContainerID(cg); ok {
			return id
		}
	}
	return ""
}

// kubernetesTargets reports whether any target selects pods.
func kubernetesTargets(targets []Target) bool {
	for _, t := range targets {
		if t.Kubernetes() {
			return true
		}
	}
	return false
}

// PodLister lists the pods of one node from the API server.
type PodLister struct {
	URL       string // the API server, e.g. https://10.96.0.1:443
	Node      string
	TokenFile string // read on every request; empty: no token
	Client    *http.Client
}

// InClusterLister returns the lister of cfg's node, with the in-cluster
// defaults for every field cfg leaves empty. It says what is missing.
func InClusterLister(cfg Kubernetes) (*PodLister, error) {
	node := cfg.NodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		return nil, errors.New("kubernetes targets need the node's name: set NODE_NAME (the chart sets it from spec.nodeName) or kubernetes.node_name")
	}
	server := cfg.APIServer
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("kubernetes targets need the API server: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not in a pod?); set kubernetes.api_server")
		}
		server = "https://" + net.JoinHostPort(host, port)
	}
	token := cfg.TokenFile
	if token == "" {
		token = serviceAccountToken
	}
	ca := cfg.CAFile
	if ca == "" && strings.HasPrefix(server, "https://") {
		ca = serviceAccountCA
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the API server is reached directly, as client-go's in-cluster config does
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("reading the API server's CA: %w (mount the service account token, automountServiceAccountToken: true)", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading the API server's CA %s: no PEM certificate in it", ca)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &PodLister{URL: server, Node: node, TokenFile: token, Client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// maxPodListBytes bounds the response read: a node's pods are far fewer.
const maxPodListBytes = 64 << 20

// List returns the pods of the node. resourceVersion=0 lets the API
// server answer from its watch cache rather than etcd, as the kubelet's
// informers do.
func (l *PodLister) List(ctx context.Context) ([]corev1.Pod, error) {
	q := url.Values{"fieldSelector": {"spec.nodeName=" + l.Node}, "resourceVersion": {"0"}}
	u := strings.TrimSuffix(l.URL, "/") + "/api/v1/pods?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", l.Node, err)
	}
	req.Header.Set("Accept", "application/json")
	if l.TokenFile != "" {
		tok, err := os.ReadFile(l.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading the service account token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	client := l.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", l.Node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		hint := ""
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
			hint = " (the service account needs list on pods cluster-wide: the chart's ClusterRole)"
		}
		return nil, fmt.Errorf("listing the pods of node %s: %s: %s%s", l.Node, resp.Status, strings.TrimSpace(string(b)), hint)
	}
	var list corev1.PodList
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPodListBytes)).Decode(&list); err != nil {
		return nil, fmt.Errorf("decoding the pods of node %s: %w", l.Node, err)
	}
	return list.Items, nil
}

// podSource keeps the last good pod index, listed at most every interval.
type podSource struct {
	log      *slog.Logger
	interval time.Duration
	newList  func() (*PodLister, error)

	mu     sync.Mutex
	lister *PodLister
	index  *PodIndex
	listed time.Time // of the last good list
	tried  time.Time
	err    error // of the last try
}

func newPodSource(cfg Config, logger *slog.Logger) *podSource {
	iv := cfg.Kubernetes.RefreshInterval
	if iv == 0 {
		iv = cfg.RefreshInterval
	}
	return &podSource{
		log: logger.With("component", "daemon"), interval: iv,
		newList: func() (*PodLister, error) { return InClusterLister(cfg.Kubernetes) },
	}
}

// Index returns the pods of the node, listing them again when the last
// try is older than the interval. Errors are logged and the last good
// index kept (nil until one list succeeded).
func (s *podSource) Index(ctx context.Context) *PodIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried.IsZero() && time.Since(s.tried) < s.interval {
		return s.index
	}
	s.tried = time.Now()
	if s.lister == nil {
		l, err := s.newList()
		if err != nil {
			s.fail(err)
			return s.index
		}
		s.lister = l
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.interval, 10*time.Second))
	defer cancel()
	pods, err := s.lister.List(ctx)
	if err != nil {
		s.fail(err)
		return s.index
	}
	if s.err != nil || s.index == nil {
		s.log.Info("listed the pods of the node", "node", s.lister.Node, "pods", len(pods))
	}
	s.index, s.listed, s.err = NewPodIndex(pods), time.Now(), nil
	return s.index
}

func (s *podSource) fail(err error) {
	if s.err == nil || s.err.Error() != err.Error() {
		s.log.Warn("kubernetes targets: keeping the last pod list", "err", err, "listed", s.listed)
	}
	s.err = err
}

// ready is nil once the pods were listed.
func (s *podSource) ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index != nil {
		return nil
	}
	if s.err != nil {
		return fmt.Errorf("kubernetes pods not listed yet: %w", s.err)
	}
	return errors.New("kubernetes pods not listed yet")
}
