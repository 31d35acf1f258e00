package hostroutingexporter // import "github.com/gpuviz/gpuviz/exporter/hostroutingexporter"

import (
	"context"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// resolver lists the replicas: once (static) or again and again (dns).
type resolver interface {
	// start calls update with the first list before it returns.
	start(ctx context.Context, update func([]string)) error
	shutdown()
}

func newResolver(cfg ResolverConfig, logger *zap.Logger) resolver {
	if s := cfg.Static.Get(); s != nil {
		return staticResolver(s.Hostnames)
	}
	d := cfg.DNS.Get()
	return &dnsResolver{
		hostname: d.Hostname, port: d.Port, interval: d.Interval, timeout: d.Timeout,
		lookup: net.DefaultResolver.LookupIPAddr, logger: logger,
	}
}

type staticResolver []string

func (s staticResolver) start(_ context.Context, update func([]string)) error {
	update(s)
	return nil
}

func (staticResolver) shutdown() {}

// dnsResolver resolves hostname every interval. A failed lookup keeps the
// replicas it had: a DNS outage must not empty the gateway tier.
type dnsResolver struct {
	hostname, port    string
	interval, timeout time.Duration
	lookup            func(ctx context.Context, host string) ([]net.IPAddr, error)
	logger            *zap.Logger
	stop              chan struct{}
	done              sync.WaitGroup
	lastErr           int
}

func (d *dnsResolver) start(_ context.Context, update func([]string)) error {
	d.resolve(update)
	d.stop = make(chan struct{})
	d.done.Add(1)
	go func() {
		defer d.done.Done()
		t := time.NewTicker(d.interval)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				d.resolve(update)
			}
		}
	}()
	return nil
}

func (d *dnsResolver) resolve(update func([]string)) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	addrs, err := d.lookup(ctx, d.hostname)
	if err != nil || len(addrs) == 0 {
		// Logged when it starts failing, not at every interval.
		if d.lastErr == 0 {
			d.logger.Warn("gateway replicas did not resolve; keeping the ones listed before",
				zap.String("hostname", d.hostname), zap.Error(err))
		}
		d.lastErr++
		return
	}
	d.lastErr = 0
	endpoints := make([]string, len(addrs))
	for i, a := range addrs {
		endpoints[i] = net.JoinHostPort(a.IP.String(), d.port)
	}
	update(endpoints)
}

func (d *dnsResolver) shutdown() {
	if d.stop != nil {
		close(d.stop)
		d.done.Wait()
	}
}
