package hostroutingexporter

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.yaml.in/yaml/v3"
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

// The README's example loads and validates, and every "default X" its
// comments give is the default.
func TestREADMEExampleLoadsAndItsDefaultsAreTheDefaults(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(string(b))
	require.NotNil(t, m, "README has a yaml block")
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(m[1]), &raw))
	sub, err := confmap.NewFromStringMap(raw).Sub("exporters::hostrouting")
	require.NoError(t, err)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	require.NoError(t, sub.Unmarshal(cfg))
	require.NoError(t, confmap.Validate(cfg))
	dns := cfg.Resolver.DNS.Get()
	require.NotNil(t, dns)

	def := NewFactory().CreateDefaultConfig().(*Config)
	defDNS := def.Resolver.DNS.Get()
	if defDNS == nil { // the default is there for a dns resolver once named
		require.NoError(t, confmap.NewFromStringMap(map[string]any{"resolver": map[string]any{"dns": map[string]any{}}}).Unmarshal(def))
		defDNS = def.Resolver.DNS.Get()
	}
	require.NotNil(t, defDNS)
	defaults := map[string]string{
		"routing_attributes": strings.Join(def.RoutingAttributes, ", "),
		"interval":           defDNS.Interval.String(),
		"timeout":            defDNS.Timeout.String(),
		"down_for":           def.DownFor.String(),
	}
	found := 0
	for _, l := range strings.Split(m[1], "\n") {
		dm := regexp.MustCompile(`^\s*([a-z_]+):.*#.*\bdefault ([^;,]+)`).FindStringSubmatch(l)
		if dm == nil {
			continue
		}
		want, ok := defaults[dm[1]]
		require.True(t, ok, "README gives a default of %s: add it to this test", dm[1])
		found++
		assert.Equal(t, want, strings.TrimSpace(dm[2]), "README's default of %s", dm[1])
	}
	assert.Equal(t, len(defaults), found, "README's defaults")
}
