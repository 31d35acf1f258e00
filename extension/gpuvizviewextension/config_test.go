package gpuvizviewextension

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	for _, tc := range []struct {
		id   component.ID
		want func(*Config)
	}{
		{component.NewID(typ), func(*Config) {}},
		{component.NewIDWithName(typ, "custom"), func(c *Config) {
			c.NetAddr.Endpoint = "127.0.0.1:9999"
			c.Retention, c.MaxGPUs, c.MaxRequests = 5*time.Minute, 16, 1000
			c.TraceURLTemplate = "http://127.0.0.1:16686/trace/{trace_id}"
		}},
	} {
		t.Run(tc.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig().(*Config)
			sub, err := cm.Sub(tc.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			require.NoError(t, confmap.Validate(cfg))
			want := createDefaultConfig()
			tc.want(want)
			assert.Equal(t, want, cfg)
		})
	}
}

func TestDefaultsAreLoopback(t *testing.T) {
	cfg := createDefaultConfig()
	assert.Equal(t, "127.0.0.1:8787", cfg.NetAddr.Endpoint)
	assert.Equal(t, 15*time.Minute, cfg.Retention)
	assert.Equal(t, 64, cfg.MaxGPUs)
	assert.Equal(t, 20000, cfg.MaxRequests)
	assert.Empty(t, cfg.TraceURLTemplate)
	require.NoError(t, cfg.Validate())
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		field string
	}{
		{"no endpoint", func(c *Config) { c.NetAddr.Endpoint = "" }, "endpoint:"},
		{"short retention", func(c *Config) { c.Retention = 30 * time.Second }, "retention:"},
		{"long retention", func(c *Config) { c.Retention = 2 * time.Hour }, "retention:"},
		{"fractional retention", func(c *Config) { c.Retention = 90*time.Second + time.Millisecond }, "retention:"},
		{"no gpus", func(c *Config) { c.MaxGPUs = 0 }, "max_gpus:"},
		{"too many gpus", func(c *Config) { c.MaxGPUs = 5000 }, "max_gpus:"},
		{"no requests", func(c *Config) { c.MaxRequests = 0 }, "max_requests:"},
		{"too many requests", func(c *Config) { c.MaxRequests = 2_000_000 }, "max_requests:"},
		{"template without trace id", func(c *Config) { c.TraceURLTemplate = "http://jaeger/trace/" }, "trace_url_template:"},
		{"template not http", func(c *Config) { c.TraceURLTemplate = "javascript:alert({trace_id})" }, "trace_url_template:"},
		{"template not http, with a host", func(c *Config) { c.TraceURLTemplate = "javascript://x/%0aalert({trace_id})" }, "trace_url_template:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			tc.set(cfg)
			err := cfg.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}
