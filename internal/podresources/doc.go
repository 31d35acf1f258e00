// Package podresources learns which pod, namespace and container each GPU
// (and MIG device) of a node is allocated to, from the kubelet's
// PodResources API (gRPC over its unix socket), and keeps that mapping
// time-versioned: a request is matched against the allocation in effect at
// its own time. See docs/kubernetes.md.
package podresources // import "github.com/gpuviz/gpuviz/internal/podresources"
