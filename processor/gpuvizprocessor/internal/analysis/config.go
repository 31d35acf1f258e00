package analysis // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config sets the windows and thresholds of a [Tracker]. See the package
// documentation for the reasoning behind each default.
type Config struct {
	// Window is the rolling time window per signal (default 5m).
	Window time.Duration
	// MaxPoints is the ring capacity per signal per GPU (default 2048).
	// Points older than Window are dropped first, then the oldest when
	// the ring is full.
	MaxPoints int
	// MinPoints is the number of points the window must hold before
	// z-scores and patterns are reported (default 30).
	MinPoints int
	// ZThreshold is the |z| at or above which a point is anomalous
	// (default 3).
	ZThreshold float64
	// LowMean is the mean utilisation below which the load is low
	// (default 0.2).
	LowMean float64
	// HighMean is the mean utilisation at or above which the load is
	// high (default 0.7).
	HighMean float64
	// StableCV is the coefficient of variation at or below which high
	// load is stable (default 0.15).
	StableCV float64
	// FluctuatingCV is the coefficient of variation at or above which the
	// load fluctuates (default 0.5).
	FluctuatingCV float64
}

// Defaults; see the package documentation for the reasons.
const (
	defaultWindow        = 5 * time.Minute
	defaultMaxPoints     = 2048
	defaultMinPoints     = 30
	defaultZThreshold    = 3.0
	defaultLowMean       = 0.2
	defaultHighMean      = 0.7
	defaultStableCV      = 0.15
	defaultFluctuatingCV = 0.5
)

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		Window:        defaultWindow,
		MaxPoints:     defaultMaxPoints,
		MinPoints:     defaultMinPoints,
		ZThreshold:    defaultZThreshold,
		LowMean:       defaultLowMean,
		HighMean:      defaultHighMean,
		StableCV:      defaultStableCV,
		FluctuatingCV: defaultFluctuatingCV,
	}
}

// Validate reports every problem with c, naming the fields as they are
// spelled in the collector configuration (snake_case). It requires:
// window > 0; min_points >= 2 (a standard deviation needs two points);
// max_points >= min_points (otherwise nothing is ever reported);
// z_threshold > 0; 0 < low_mean < high_mean <= 1 (utilisation is a
// fraction); 0 < stable_cv < fluctuating_cv; all values finite.
func (c Config) Validate() error {
	var errs []error
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("window must be positive, got %v", c.Window))
	}
	if c.MinPoints < 2 {
		errs = append(errs, fmt.Errorf("min_points must be at least 2, got %d", c.MinPoints))
	}
	if c.MaxPoints < 2 {
		errs = append(errs, fmt.Errorf("max_points must be at least 2, got %d", c.MaxPoints))
	} else if c.MaxPoints < c.MinPoints {
		errs = append(errs, fmt.Errorf("min_points: %d must be at most %d, the points kept per series (max_points)", c.MinPoints, c.MaxPoints))
	}
	if !positive(c.ZThreshold) {
		errs = append(errs, fmt.Errorf("z_threshold must be positive and finite, got %v", c.ZThreshold))
	}
	lowOK, highOK := positive(c.LowMean), positive(c.HighMean) && c.HighMean <= 1
	if !lowOK {
		errs = append(errs, fmt.Errorf("low_mean must be positive and finite, got %v", c.LowMean))
	}
	if !highOK {
		errs = append(errs, fmt.Errorf("high_mean must be in (0, 1], got %v", c.HighMean))
	}
	if lowOK && highOK && c.LowMean >= c.HighMean {
		errs = append(errs, fmt.Errorf("low_mean (%v) must be less than high_mean (%v)", c.LowMean, c.HighMean))
	}
	stableOK, fluctOK := positive(c.StableCV), positive(c.FluctuatingCV)
	if !stableOK {
		errs = append(errs, fmt.Errorf("stable_cv must be positive and finite, got %v", c.StableCV))
	}
	if !fluctOK {
		errs = append(errs, fmt.Errorf("fluctuating_cv must be positive and finite, got %v", c.FluctuatingCV))
	}
	if stableOK && fluctOK && c.StableCV >= c.FluctuatingCV {
		errs = append(errs, fmt.Errorf("stable_cv (%v) must be less than fluctuating_cv (%v)", c.StableCV, c.FluctuatingCV))
	}
	return errors.Join(errs...)
}

// positive reports whether x is positive and finite (false for NaN).
func positive(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

// withDefaults fills zero-valued fields with their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.MaxPoints == 0 {
		c.MaxPoints = d.MaxPoints
	}
	if c.MinPoints == 0 {
		c.MinPoints = d.MinPoints
	}
	if c.ZThreshold == 0 {
		c.ZThreshold = d.ZThreshold
	}
	if c.LowMean == 0 {
		c.LowMean = d.LowMean
	}
	if c.HighMean == 0 {
		c.HighMean = d.HighMean
	}
	if c.StableCV == 0 {
		c.StableCV = d.StableCV
	}
	if c.FluctuatingCV == 0 {
		c.FluctuatingCV = d.FluctuatingCV
	}
	return c
}
