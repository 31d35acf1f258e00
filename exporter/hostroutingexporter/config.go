package hostroutingexporter // import "github.com/gpuviz/gpuviz/exporter/hostroutingexporter"

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
)

// Config is the host routing exporter's configuration. The sending queue,
// retry and timeout apply to the whole export (after failover); the OTLP
// exporter of each replica sends once, without a queue or retries of its
// own, so that a failing replica is noticed at once.
type Config struct {
	TimeoutConfig exporterhelper.TimeoutConfig                             `mapstructure:",squash"`
	QueueConfig   configoptional.Optional[exporterhelper.QueueBatchConfig] `mapstructure:"sending_queue"`
	RetryConfig   configretry.BackOffConfig                                `mapstructure:"retry_on_failure"`

	// Protocol is how each replica is sent to: an OTLP/gRPC exporter's
	// settings (TLS, auth, headers, compression, timeout); its endpoint is
	// the resolver's.
	Protocol ProtocolConfig `mapstructure:"protocol"`
	// Resolver lists the replicas.
	Resolver ResolverConfig `mapstructure:"resolver"`
	// RoutingAttributes are the resource attributes whose values, joined,
	// are the routing key: host.name keeps a host's spans and GPU samples
	// on one replica.
	RoutingAttributes []string `mapstructure:"routing_attributes"`
	// DownFor is how long a replica that failed an export gets no data;
	// then it is tried again and its hosts return.
	DownFor time.Duration `mapstructure:"down_for"`

	_ struct{}
}

// ProtocolConfig holds the per-replica exporter's settings.
type ProtocolConfig struct {
	OTLP otlpexporter.Config `mapstructure:"otlp"`

	_ struct{}
}

// ResolverConfig says where the replicas come from: exactly one of static
// or dns.
type ResolverConfig struct {
	Static configoptional.Optional[StaticResolverConfig] `mapstructure:"static"`
	DNS    configoptional.Optional[DNSResolverConfig]    `mapstructure:"dns"`

	_ struct{}
}

// StaticResolverConfig is a fixed list of replicas, host:port each.
type StaticResolverConfig struct {
	Hostnames []string `mapstructure:"hostnames"`

	_ struct{}
}

// DNSResolverConfig resolves a name (a Kubernetes headless Service lists
// its ready pods) every interval; each address with port is a replica.
type DNSResolverConfig struct {
	Hostname string        `mapstructure:"hostname"`
	Port     string        `mapstructure:"port"`
	Interval time.Duration `mapstructure:"interval"`
	Timeout  time.Duration `mapstructure:"timeout"`

	_ struct{}
}

// Validate names the field at fault.
func (c *Config) Validate() error {
	var errs []error
	static, dns := c.Resolver.Static.Get(), c.Resolver.DNS.Get()
	switch {
	case static == nil && dns == nil:
		errs = append(errs, errors.New("resolver: set static or dns"))
	case static != nil && dns != nil:
		errs = append(errs, errors.New("resolver: set static or dns, not both"))
	case static != nil:
		if len(static.Hostnames) == 0 {
			errs = append(errs, errors.New("resolver.static.hostnames: list at least one replica"))
		}
		for i, h := range static.Hostnames {
			if _, port, err := net.SplitHostPort(h); err != nil {
				errs = append(errs, fmt.Errorf("resolver.static.hostnames[%d]: %q is not host:port: %w", i, h, err))
			} else if !isPort(port) {
				errs = append(errs, fmt.Errorf("resolver.static.hostnames[%d]: %q has no port number (1 to 65535)", i, h))
			}
		}
	default:
		if dns.Hostname == "" {
			errs = append(errs, errors.New("resolver.dns.hostname: must be set"))
		} else if _, _, err := net.SplitHostPort(dns.Hostname); err == nil {
			errs = append(errs, fmt.Errorf("resolver.dns.hostname: %q has a port: give the name alone, the port in port", dns.Hostname))
		}
		if dns.Port == "" {
			errs = append(errs, errors.New("resolver.dns.port: must be set"))
		} else if !isPort(dns.Port) {
			errs = append(errs, fmt.Errorf("resolver.dns.port: %q is not a port number (1 to 65535)", dns.Port))
		}
		if dns.Interval <= 0 {
			errs = append(errs, fmt.Errorf("resolver.dns.interval: %v must be positive", dns.Interval))
		}
		if dns.Timeout <= 0 || dns.Timeout > dns.Interval {
			errs = append(errs, fmt.Errorf("resolver.dns.timeout: %v must be positive and at most the interval", dns.Timeout))
		}
	}
	if len(c.RoutingAttributes) == 0 {
		errs = append(errs, errors.New("routing_attributes: name at least one resource attribute"))
	}
	for i, a := range c.RoutingAttributes {
		if a == "" {
			errs = append(errs, fmt.Errorf("routing_attributes[%d]: empty", i))
		}
	}
	if c.DownFor <= 0 {
		errs = append(errs, fmt.Errorf("down_for: %v must be positive", c.DownFor))
	}
	return errors.Join(errs...)
}

// isPort reports whether s is a port number, 1 to 65535: a misspelt port
// would otherwise fail every export, only once the collector is running.
func isPort(s string) bool {
	p, err := strconv.ParseUint(s, 10, 16)
	return err == nil && p > 0
}
