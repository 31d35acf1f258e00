package gpuvizviewextension // import "github.com/gpuviz/gpuviz/extension/gpuvizviewextension"

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/collector/config/confighttp"

	"github.com/gpuviz/gpuviz/internal/view"
)

// Defaults, one per knob.
const (
	// defaultEndpoint is loopback: the view shows trace IDs, models and
	// host names, and has no authentication unless configured.
	defaultEndpoint = "127.0.0.1:8787"
	// defaultRetention is the longest range the page offers (15 min).
	defaultRetention = 15 * time.Minute
	// defaultMaxGPUs fits the largest single-host servers eight times
	// over; a source is about 0.23 MB per GPU at the default retention
	// (docs/view.md).
	defaultMaxGPUs = 64
	// defaultMaxRequests holds 15 minutes at 22 requests a second, 7 to
	// 9 MB (docs/view.md).
	defaultMaxRequests = 20000
)

// Bounds the knobs are validated against.
const (
	maxRetention   = time.Hour
	maxGPUsLimit   = 1024
	maxRequestsCap = 1_000_000
)

// Config is the gpuviz_view extension's configuration.
type Config struct {
	// The HTTP server: endpoint, TLS, auth, CORS, headers... The view is
	// served only where configured.
	confighttp.ServerConfig `mapstructure:",squash"`
	// Retention is how far back the view serves, and the bound of its
	// store: whole seconds, 1 minute to 1 hour.
	Retention time.Duration `mapstructure:"retention"`
	// MaxGPUs is the number of GPUs kept per source; more are refused and
	// counted (a GPU silent for the whole retention makes room).
	MaxGPUs int `mapstructure:"max_gpus"`
	// MaxRequests is the number of recent requests kept per source; the
	// oldest is dropped (counted).
	MaxRequests int `mapstructure:"max_requests"`
	// TraceURLTemplate links a request to a trace UI: {trace_id} (and
	// {span_id}) are replaced, e.g. http://127.0.0.1:16686/trace/{trace_id}.
	// Empty: no link.
	TraceURLTemplate string `mapstructure:"trace_url_template"`

	_ struct{}
}

func createDefaultConfig() *Config {
	sc := confighttp.NewDefaultServerConfig()
	sc.NetAddr.Endpoint = defaultEndpoint
	return &Config{ServerConfig: sc, Retention: defaultRetention, MaxGPUs: defaultMaxGPUs, MaxRequests: defaultMaxRequests}
}

// Validate checks every knob, naming it.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.NetAddr.Endpoint == "" {
		errs = append(errs, errors.New("endpoint: must be set (e.g. 127.0.0.1:8787)"))
	}
	switch {
	case cfg.Retention < view.MinRange || cfg.Retention > maxRetention:
		errs = append(errs, fmt.Errorf("retention: %v is outside %v to %v", cfg.Retention, view.MinRange, maxRetention))
	case cfg.Retention%time.Second != 0:
		errs = append(errs, fmt.Errorf("retention: %v is not a whole number of seconds", cfg.Retention))
	}
	if cfg.MaxGPUs < 1 || cfg.MaxGPUs > maxGPUsLimit {
		errs = append(errs, fmt.Errorf("max_gpus: %d is outside 1 to %d", cfg.MaxGPUs, maxGPUsLimit))
	}
	if cfg.MaxRequests < 1 || cfg.MaxRequests > maxRequestsCap {
		errs = append(errs, fmt.Errorf("max_requests: %d is outside 1 to %d", cfg.MaxRequests, maxRequestsCap))
	}
	if t := cfg.TraceURLTemplate; t != "" {
		u, err := url.Parse(strings.NewReplacer("{trace_id}", "x", "{span_id}", "x").Replace(t))
		switch {
		case !strings.Contains(t, "{trace_id}"):
			errs = append(errs, fmt.Errorf("trace_url_template: %q has no {trace_id}", t))
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, fmt.Errorf("trace_url_template: %q is not an http(s) URL", t))
		}
	}
	return errors.Join(errs...)
}

func (cfg *Config) limits() view.Limits {
	return view.Limits{Retention: cfg.Retention, MaxGPUs: cfg.MaxGPUs, MaxRequests: cfg.MaxRequests}
}
