package analysis

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	assert.Equal(t, 5*time.Minute, c.Window)
	assert.Equal(t, 2048, c.MaxPoints)
	assert.Equal(t, 30, c.MinPoints)
	assert.Equal(t, 3.0, c.ZThreshold)
	assert.Equal(t, 0.2, c.LowMean)
	assert.Equal(t, 0.7, c.HighMean)
	assert.Equal(t, 0.15, c.StableCV)
	assert.Equal(t, 0.5, c.FluctuatingCV)
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		fields []string // substrings every one of which must appear
	}{
		{"zero window", func(c *Config) { c.Window = 0 }, []string{"window"}},
		{"negative window", func(c *Config) { c.Window = -time.Second }, []string{"window"}},
		{"max_points too small", func(c *Config) { c.MaxPoints = 1 }, []string{"max_points"}},
		{"max_points below min_points", func(c *Config) { c.MaxPoints = 10; c.MinPoints = 20 }, []string{"max_points", "min_points"}},
		{"min_points too small", func(c *Config) { c.MinPoints = 1 }, []string{"min_points"}},
		{"zero z_threshold", func(c *Config) { c.ZThreshold = 0 }, []string{"z_threshold"}},
		{"NaN z_threshold", func(c *Config) { c.ZThreshold = math.NaN() }, []string{"z_threshold"}},
		{"infinite z_threshold", func(c *Config) { c.ZThreshold = math.Inf(1) }, []string{"z_threshold"}},
		{"zero low_mean", func(c *Config) { c.LowMean = 0 }, []string{"low_mean"}},
		{"NaN low_mean", func(c *Config) { c.LowMean = math.NaN() }, []string{"low_mean"}},
		{"high_mean above 1", func(c *Config) { c.HighMean = 1.5 }, []string{"high_mean"}},
		{"negative high_mean", func(c *Config) { c.HighMean = -0.1 }, []string{"high_mean"}},
		{"low_mean equals high_mean", func(c *Config) { c.LowMean, c.HighMean = 0.5, 0.5 }, []string{"low_mean", "high_mean"}},
		{"low_mean above high_mean", func(c *Config) { c.LowMean, c.HighMean = 0.8, 0.3 }, []string{"low_mean", "high_mean"}},
		{"zero stable_cv", func(c *Config) { c.StableCV = 0 }, []string{"stable_cv"}},
		{"negative fluctuating_cv", func(c *Config) { c.FluctuatingCV = -1 }, []string{"fluctuating_cv"}},
		{"NaN fluctuating_cv", func(c *Config) { c.FluctuatingCV = math.NaN() }, []string{"fluctuating_cv"}},
		{"stable_cv equals fluctuating_cv", func(c *Config) { c.StableCV, c.FluctuatingCV = 0.3, 0.3 }, []string{"stable_cv", "fluctuating_cv"}},
		{"stable_cv above fluctuating_cv", func(c *Config) { c.StableCV, c.FluctuatingCV = 0.6, 0.4 }, []string{"stable_cv", "fluctuating_cv"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			for _, f := range tt.fields {
				assert.Contains(t, err.Error(), f)
			}
		})
	}

	t.Run("all errors reported", func(t *testing.T) {
		err := Config{}.Validate()
		require.Error(t, err)
		for _, f := range []string{"window", "max_points", "min_points", "z_threshold", "low_mean", "high_mean", "stable_cv", "fluctuating_cv"} {
			assert.Contains(t, err.Error(), f)
		}
		assert.Len(t, strings.Split(err.Error(), "\n"), 8)
	})

	t.Run("valid edge values", func(t *testing.T) {
		c := DefaultConfig()
		c.MinPoints, c.MaxPoints, c.HighMean = 2, 2, 1
		require.NoError(t, c.Validate())
	})
}

func TestNewTrackerDefaults(t *testing.T) {
	tr := NewTracker(Config{})
	assert.Equal(t, DefaultConfig(), tr.cfg)

	tr = NewTracker(Config{MinPoints: 5, ZThreshold: 2})
	want := DefaultConfig()
	want.MinPoints, want.ZThreshold = 5, 2
	assert.Equal(t, want, tr.cfg)

	assert.PanicsWithValue(t,
		"analysis: invalid config: low_mean (0.8) must be less than high_mean (0.7)",
		func() { NewTracker(Config{LowMean: 0.8}) })
}
