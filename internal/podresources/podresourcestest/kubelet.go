// Package podresourcestest serves the kubelet's PodResources API on a unix
// socket for tests: a real gRPC server whose answer can be changed, and
// which can be stopped and started again like a restarting kubelet.
package podresourcestest // import "github.com/gpuviz/gpuviz/internal/podresources/podresourcestest"

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Kubelet is a PodResources server.
type Kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	// Path is the socket's path.
	Path string

	mu   sync.Mutex
	pods []*podresourcesv1.PodResources
	srv  *grpc.Server
	l    *net.UnixListener
	done chan struct{}
}

// New returns a kubelet whose socket is in a new temporary directory (unix
// socket paths are limited to 108 bytes, too short for t.TempDir's); it is
// not serving until Start.
func New(t testing.TB) *Kubelet {
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &Kubelet{Path: filepath.Join(dir, "kubelet.sock")}
}

// List answers with the pods set last.
func (k *Kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// Set replaces what List answers.
func (k *Kubelet) Set(pods ...*podresourcesv1.PodResources) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = pods
}

// Start serves on Path until Stop (or the test's end).
func (k *Kubelet) Start(t testing.TB) {
	_ = os.Remove(k.Path)
	l, err := net.Listen("unix", k.Path)
	if err != nil {
		t.Fatal(err)
	}
	k.l = l.(*net.UnixListener)
	k.srv = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(k.srv, k)
	k.done = make(chan struct{})
	go func() { defer close(k.done); _ = k.srv.Serve(l) }()
	t.Cleanup(k.Stop)
}

// Stop stops serving and removes the socket, as a kubelet restart does.
func (k *Kubelet) Stop() {
	if k.srv == nil {
		return
	}
	k.srv.Stop()
	<-k.done
	k.srv = nil
	_ = os.Remove(k.Path)
}

// Kill stops serving and leaves the socket behind, as a kubelet that was
// killed (or crashes, or is restarting) does: dialling it is refused until
// Start.
func (k *Kubelet) Kill() {
	if k.srv == nil {
		return
	}
	k.l.SetUnlinkOnClose(false)
	k.srv.Stop()
	<-k.done
	k.srv = nil
}

// Pod is a pod with containers.
func Pod(namespace, name string, containers ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: containers}
}

// Container is a container holding devices of one resource.
func Container(name, resource string, ids ...string) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: []*podresourcesv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}}}
}
