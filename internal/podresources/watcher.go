package podresources // import "github.com/gpuviz/gpuviz/internal/podresources"

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Config configures a Watcher.
type Config struct {
	// Socket is the kubelet's PodResources socket path (a unix:// prefix is
	// allowed).
	Socket string
	// Interval is how often the allocation is listed: a change is seen
	// within it.
	Interval time.Duration
	// Timeout bounds one List call.
	Timeout time.Duration
	// Horizon is how long superseded allocations are kept for matching
	// things that happened under them; MaxVersions bounds them in number.
	Horizon     time.Duration
	MaxVersions int
}

// Validate names the bad fields.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimPrefix(c.Socket, "unix://") == "" {
		errs = append(errs, errors.New("socket: must not be empty"))
	}
	if c.Interval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("interval: %v must be at least 100ms", c.Interval))
	}
	if c.Timeout <= 0 || c.Timeout > c.Interval {
		errs = append(errs, fmt.Errorf("timeout: %v must be positive and at most the interval (%v)", c.Timeout, c.Interval))
	}
	if c.Horizon < c.Interval {
		errs = append(errs, fmt.Errorf("horizon: %v must be at least the interval (%v)", c.Horizon, c.Interval))
	}
	if c.MaxVersions < 1 {
		errs = append(errs, fmt.Errorf("max_versions: %d must be at least 1", c.MaxVersions))
	}
	return errors.Join(errs...)
}

// Watcher lists the kubelet's pod resources on its own goroutine and keeps
// them in a History: readers never wait on the kubelet. A socket that is
// missing or unreadable is logged once (and once again when it comes back);
// until then the history simply has nothing new.
type Watcher struct {
	cfg     Config
	resolve Resolver
	logger  *zap.Logger
	history *History
	now     func() time.Time

	mu         sync.Mutex
	unresolved int
	failing    bool
	lastErr    error

	// conn is the kubelet connection, nil until dialled and after a
	// failed List; only refresh touches it once started.
	conn *grpc.ClientConn

	stop chan struct{}
	done chan struct{}
}

// NewWatcher returns a watcher; cfg must be valid. resolve turns GPU indexes
// into UUIDs (nil: index IDs are not resolved).
func NewWatcher(cfg Config, resolve Resolver, logger *zap.Logger) *Watcher {
	return &Watcher{
		cfg: cfg, resolve: resolve, logger: logger, now: time.Now,
		history: NewHistory(cfg.Horizon, cfg.MaxVersions),
	}
}

// History returns the allocations seen so far.
func (w *Watcher) History() *History { return w.history }

// Start lists once, then every interval, until Shutdown.
func (w *Watcher) Start() error {
	// A target the client refuses is a configuration error, said now.
	conn, err := w.dial()
	if err != nil {
		return err
	}
	w.conn = conn
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		defer w.closeConn()
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		for {
			w.refresh()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// dial returns a client connection to the socket; it connects on the first
// call.
func (w *Watcher) dial() (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(w.cfg.Socket, "unix://")
	// The passthrough resolver hands the path to the dialer as is; the
	// kubelet serves plain gRPC on its local socket.
	conn, err := grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
	if err != nil {
		return nil, fmt.Errorf("pod resources: %w", err)
	}
	return conn, nil
}

// closeConn closes the connection, if any.
func (w *Watcher) closeConn() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// list lists the pod resources. A connection whose List failed is closed
// and the next list dials anew: gRPC would retry it on its own backoff, up
// to 2 minutes apart once the kubelet has been down a while, failing every
// List in between, so that a kubelet back from a restart would be listed
// again only then, not within the interval.
func (w *Watcher) list() (*podresourcesv1.ListPodResourcesResponse, error) {
	if w.conn == nil {
		conn, err := w.dial()
		if err != nil {
			return nil, err
		}
		w.conn = conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(w.conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		w.closeConn()
	}
	return resp, err
}

// Shutdown stops the watcher and waits for it.
func (w *Watcher) Shutdown() {
	if w.stop == nil {
		return
	}
	close(w.stop)
	<-w.done
	w.stop = nil
}

// refresh lists the pod resources once and records them. Where the socket
// does not exist it is not dialled: gRPC would log every reconnect of its
// backoff as a warning, on every machine outside Kubernetes. Only the
// watcher's goroutine (or a test, without Start) calls it.
func (w *Watcher) refresh() {
	var resp *podresourcesv1.ListPodResourcesResponse
	_, err := os.Stat(strings.TrimPrefix(w.cfg.Socket, "unix://"))
	absent := errors.Is(err, fs.ErrNotExist)
	if !absent {
		resp, err = w.list()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		if !w.failing {
			w.failing = true
			fields := []zap.Field{zap.String("socket", w.cfg.Socket), zap.Duration("interval", w.cfg.Interval), zap.Error(err)}
			if absent {
				// Not on Kubernetes, or the socket is not mounted: not a fault.
				w.logger.Info("Kubernetes pod mapping off: no kubelet PodResources socket; looking again every interval", fields...)
			} else {
				w.logger.Warn("Kubernetes pod mapping off: the kubelet's PodResources socket cannot be read; retrying every interval", fields...)
			}
		}
		return
	}
	if w.failing {
		w.failing = false
		w.logger.Info("Kubernetes pod mapping on: the kubelet's PodResources socket answers again", zap.String("socket", w.cfg.Socket))
	}
	w.lastErr = nil
	a, unresolved := FromList(resp, w.resolve)
	w.unresolved = unresolved
	w.history.Observe(w.now(), a)
}

// Status returns the last List error (nil when it answered) and how many
// GPU device IDs it named that resolved to no GPU of this node.
func (w *Watcher) Status() (lastErr error, unresolved int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr, w.unresolved
}
