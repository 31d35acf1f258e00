package hostroutingexporter

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestConfigLoadsAndValidates(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	tests := []struct {
		name, wantErr string
	}{
		{"dns", ""},
		{"static", ""},
		{"none", "resolver: set static or dns"},
		{"both", "resolver: set static or dns, not both"},
		{"bad_hostname", `resolver.static.hostnames[1]: "gw-1" is not host:port`},
		{"bad_dns", "resolver.dns.port: must be set"},
		{"bad_dns_port", `resolver.dns.port: "99999" is not a port number (1 to 65535)`},
		{"dns_hostname_with_port", `resolver.dns.hostname: "gw:4317" has a port: give the name alone, the port in port`},
		{"bad_static_port", `resolver.static.hostnames[1]: "gw-1:otlp" has no port number (1 to 65535)`},
		{"no_attributes", "routing_attributes: name at least one resource attribute"},
		{"bad_down_for", "down_for: 0s must be positive"},
		{"no_hostnames", "resolver.static.hostnames: list at least one replica"},
		{"dns_no_hostname", "resolver.dns.hostname: must be set"},
		{"dns_no_interval", "resolver.dns.interval: 0s must be positive"},
		{"dns_timeout_over_interval", "resolver.dns.timeout: 2s must be positive and at most the interval"},
		{"dns_timeout_is_interval", ""},
		{"empty_attribute", "routing_attributes[1]: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig().(*Config)
			sub, err := cm.Sub(tt.name)
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestDNSDefaultsApplyWhenDNSIsNamed(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub("dns")
	require.NoError(t, err)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	require.NoError(t, sub.Unmarshal(cfg))
	d := cfg.Resolver.DNS.Get()
	require.NotNil(t, d)
	assert.Equal(t, 5*time.Second, d.Interval)
	assert.Equal(t, time.Second, d.Timeout)
	assert.Equal(t, []string{"host.name"}, cfg.RoutingAttributes)
	assert.Equal(t, 15*time.Second, cfg.DownFor)
}
