package agent

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// PodResolver finds the process a session on a pod follows: the root of
// the process tree of the pod's container on this node. It returns the
// reference with the container filled in. Errors wrap ErrPodNotFound
// when the node runs no such pod or container, ErrNoKubernetes when the
// node's pods cannot be listed; any other error is the request's.
//
// The daemon provides it (its Kubernetes pod list, daemon/k8s.go); an
// agent without one refuses pod targets with ErrNoKubernetes.
type PodResolver func(ctx context.Context, ref PodRef) (pid int, resolved PodRef, err error)

// The errors of a PodResolver the server answers with their own status.
var (
	// ErrPodNotFound: 404.
	ErrPodNotFound = errors.New("no such pod on this node")
	// ErrNoKubernetes: 501 (the agent cannot list its node's pods).
	ErrNoKubernetes = errors.New("this agent cannot list its node's pods")
)

var (
	// A namespace or container name: an RFC 1123 label; a pod name: an
	// RFC 1123 subdomain (as the API server validates them).
	podLabelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	podSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// Validate says what is wrong with a reference.
func (p PodRef) Validate() error {
	if !podLabelRE.MatchString(p.Namespace) {
		return fmt.Errorf("pod %s: namespace %q is not a Kubernetes namespace name (lower-case letters, digits and -)", p, p.Namespace)
	}
	if !podSubdomainRE.MatchString(p.Name) {
		return fmt.Errorf("pod %s: %q is not a Kubernetes pod name (lower-case letters, digits, - and .)", p, p.Name)
	}
	if p.Container != "" && !podLabelRE.MatchString(p.Container) {
		return fmt.Errorf("pod %s: container %q is not a Kubernetes container name (lower-case letters, digits and -)", p, p.Container)
	}
	return nil
}

// ParsePodRef reads NAMESPACE/POD or NAMESPACE/POD/CONTAINER.
func ParsePodRef(s string) (PodRef, error) {
	f := strings.Split(s, "/")
	if len(f) < 2 || len(f) > 3 {
		return PodRef{}, fmt.Errorf("pod %q: give NAMESPACE/POD or NAMESPACE/POD/CONTAINER", s)
	}
	p := PodRef{Namespace: f[0], Name: f[1]}
	if len(f) == 3 {
		p.Container = f[2]
	}
	return p, p.Validate()
}

// SetPodResolver lets sessions target pods. Call it before serving.
func (s *Server) SetPodResolver(r PodResolver) { s.pods = r }

// resolvePod resolves a pod target, answering the request's error status.
func (s *Server) resolvePod(ctx context.Context, ref PodRef) (int, PodRef, int, error) {
	if err := ref.Validate(); err != nil {
		return 0, ref, 400, err
	}
	if s.pods == nil {
		return 0, ref, 501, fmt.Errorf("pod %s: %w: this agent resolves pods with the daemon's Kubernetes pod list (run it in the chart's DaemonSet, or set kubernetes.node_name and kubernetes.api_server)", ref, ErrNoKubernetes)
	}
	pid, got, err := s.pods(ctx, ref)
	switch {
	case err == nil:
		return pid, got, 0, nil
	case errors.Is(err, ErrPodNotFound):
		return 0, ref, 404, err
	case errors.Is(err, ErrNoKubernetes):
		return 0, ref, 501, err
	}
	return 0, ref, 400, err
}
