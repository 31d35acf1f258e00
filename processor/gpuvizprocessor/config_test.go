package gpuvizprocessor

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.yaml.in/yaml/v3"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
)

func loadConfig(t *testing.T, name string) *Config {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.MustNewIDWithName(metadata.Type.String(), name).String())
	require.NoError(t, err)
	cfg := createDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	return cfg
}

func TestLoadConfig(t *testing.T) {
	require.NoError(t, confmap.Validate(loadConfig(t, "")))
	assert.Equal(t, createDefaultConfig(), loadConfig(t, ""))

	want := createDefaultConfig()
	want.MaxWait = 5 * time.Second
	want.MaxPendingSpans = 100
	want.History.MaxGPUs = 16
	want.History.AlignGPM = false
	want.Match.Order = []string{MatchProcess, MatchHost}
	want.PhaseSpans = false
	want.ResultsOn = ResultsOnChild
	want.Rules = []RuleConfig{{Name: "myserver", SpanName: "generate", DecodeSecondsAttribute: "myserver.decode_s"}}
	want.Bottleneck.MemoryDRAM = 0.6
	want.Metrics.Interval = 30 * time.Second
	want.Metrics.Accounting = AccountingConfig{TenantAttribute: "team", MaxTenants: 32}
	want.Analysis.Enabled = false
	want.Attribution.SettleWindow = 3 * time.Second
	want.Attribution.SamplingRatio = 0.1
	want.ReleaseRetry = 10 * time.Second
	got := loadConfig(t, "custom")
	require.NoError(t, confmap.Validate(got))
	assert.Equal(t, want, got)
}

func TestInvalidConfig(t *testing.T) {
	for name, msg := range map[string]string{
		"bad_wait":             "max_wait: 0s must be positive",
		"bad_pending":          "max_pending_spans: 0 must be at least 1",
		"bad_history":          "history.max_gpus must be at least 1",
		"too_many_gpus":        "history.max_gpus: 65536 must be at most 65535",
		"bad_order":            `match.order[1]: "gpu" is not a matching method`,
		"empty_order":          "match.order: name at least one of pod, slurm, attribute, process, host",
		"bad_results_on":       `results_on: "span" is not one of "request", "child"`,
		"bad_threshold":        "bottleneck.memory_dram: 1.5 must be a share",
		"bad_power_swing":      "bottleneck.power_swing: 40 must be a share in [0, 1] (0 turns it off)",
		"bad_rule":             "name",
		"bad_interval":         "metrics.interval: -1s must be positive",
		"bad_analysis":         "analysis.low_mean (0.9) must be less than high_mean (0.5)",
		"bad_settle":           "attribution.settle_window: 30s must be at least 0 and below max_wait (20s)",
		"bad_ratio":            "attribution.sampling_ratio: 0 must be in (0, 1]",
		"bad_horizon":          "attribution.horizon: 40s must be at least finalize_after + the longest a span is held, max(max_wait, 2 × history.max_span) (1m30s)",
		"bad_retry":            "release_retry: -1s must not be negative",
		"bad_warmup":           "attribution.warmup_wait: -1s must not be negative",
		"bad_expiry":           "metrics.idle_expiry: 1s must be at least metrics.interval (10s)",
		"bad_tenants":          "metrics.accounting.max_tenants: 0 must be at least 1",
		"bad_tenant_attribute": `metrics.accounting.tenant_attribute: " team" has leading or trailing spaces`,
		"bad_retention":        "history.retention: 1s must be at least attribution.horizon (5m0s)",
		"bad_request_duration": "max_request_duration: must be positive, got 0s",
		"bad_gpu_id_attribute": "match.gpu_id_attributes[0]: must not be empty",
		"bad_min_points":       "analysis.min_points: 5000 must be at most 2048",
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorContains(t, confmap.Validate(loadConfig(t, name)), msg)
		})
	}
	assert.ErrorContains(t, confmap.Validate(loadConfig(t, "bad_order")), `match.order[2]: "attribute" is listed twice`)
}

// TestInvalidConfigPaths: where a section has several bad fields, each
// error names its own field by its YAML path, not only the first.
func TestInvalidConfigPaths(t *testing.T) {
	for name, paths := range map[string][]string{
		"bad_history_fields":     {"history.max_gpus ", "history.max_points_per_signal "},
		"bad_bottleneck_fields":  {"bottleneck.compute_sm: ", "bottleneck.memory_dram: "},
		"bad_attribution_fields": {"attribution.horizon: ", "attribution.sampling_ratio: "},
		"bad_analysis_fields":    {"analysis.window ", "analysis.z_threshold "},
	} {
		t.Run(name, func(t *testing.T) {
			err := confmap.Validate(loadConfig(t, name))
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			for _, p := range paths {
				assert.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, p) }),
					"no error line starts with %q:\n%v", p, err)
			}
		})
	}
}

// readmeYAML returns the README's ```yaml blocks that follow heading.
func readmeYAML(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "README has %q", heading)
	doc = doc[i+len(heading)+2:]
	if j := strings.Index(doc, "\n## "); j >= 0 {
		doc = doc[:j]
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		out = append(out, m[1])
	}
	require.NotEmpty(t, out, "README's %q has a yaml block", heading)
	return out
}

// The README's Configuration block gives every knob at its default (and
// one rule as an example): it loads, validates and, less the rule, is
// createDefaultConfig.
func TestREADMEConfigurationIsTheDefaults(t *testing.T) {
	blocks := readmeYAML(t, "## Configuration")
	require.Len(t, blocks, 1)
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(blocks[0]), &raw))
	conf := confmap.NewFromStringMap(raw)
	sub, err := conf.Sub("processors::gpuviz")
	require.NoError(t, err)
	// Every knob of the configuration is in the block.
	var keys []string
	for _, k := range sub.AllKeys() {
		if !strings.HasPrefix(k, "rules") {
			keys = append(keys, k)
		}
	}
	defaults := confmap.New()
	require.NoError(t, defaults.Marshal(createDefaultConfig()))
	var want []string
	for _, k := range defaults.AllKeys() {
		if !strings.HasPrefix(k, "rules") {
			want = append(want, k)
		}
	}
	assert.ElementsMatch(t, want, keys, "the README's configuration block lists every knob")

	cfg := createDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	require.NoError(t, confmap.Validate(cfg))
	require.Len(t, cfg.Rules, 1)
	cfg.Rules = nil
	assert.Equal(t, createDefaultConfig(), cfg, "the README's configuration block gives the defaults")

	// The other blocks load into the configuration and validate.
	for _, h := range []string{"### Accounting (charge-back)"} {
		for _, b := range readmeYAML(t, h) {
			var raw map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(b), &raw))
			cfg := createDefaultConfig()
			require.NoError(t, confmap.NewFromStringMap(raw).Unmarshal(cfg), h)
			require.NoError(t, confmap.Validate(cfg), h)
		}
	}
}
