package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuviz/gpuviz/internal/confpath"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// Config is the gpuviz processor's configuration. Every knob is optional.
type Config struct {
	// MaxWait bounds how long an inference span is held for GPU samples
	// covering its end. Default 20 s: two of the receiver's default 10 s
	// collection intervals, so the scrape after the span ended has arrived.
	// Where a span's GPUs are fed less often (dcgm-exporter scrapes every
	// 30 s), the wait grows to two of their observed sample spacings, up
	// to two history.max_span (hold.wait); so may a long request's where
	// its GPUs' forecasts fell short (docs/attribution.md, "Long requests").
	MaxWait time.Duration `mapstructure:"max_wait"`
	// MaxPendingSpans bounds the spans held at once: every span of a held
	// batch, inference span or not. Past it, new batches pass through
	// un-enriched (and are counted): memory stays bounded under any span
	// rate. Default 200,000: 20,000 spans/s held for the
	// settle window and the second or two their energy takes to arrive,
	// with room. A held vLLM span is about 2 KB of heap while it waits
	// (its decoded pdata, and 560 B of the processor's state) and 3.5 KB
	// while its settle group is released (its 1,032 B result, in a buffer
	// reused until the hold is empty, and the phase spans and attributes
	// written on it), so
	// the bound is about max_pending_spans × 3.5 KB of heap: 700 MB at
	// the default. With results_on: child what waits is an empty child
	// span in place of the request span, so the bound holds with room.
	// Under a memory_limiter, size it to the limit
	// (examples/quickstart/config.yaml).
	MaxPendingSpans int `mapstructure:"max_pending_spans"`
	// History bounds the GPU timeline.
	History HistoryConfig `mapstructure:"history"`
	// Match says how spans are matched to GPUs.
	Match MatchConfig `mapstructure:"match"`
	// PhaseSpans adds a child span per phase (gpu.queue, gpu.prefill,
	// gpu.decode, gpu.inference) carrying that phase's GPU statistics.
	PhaseSpans bool `mapstructure:"phase_spans"`
	// ResultsOn says where a span's results go. "request" (default): on
	// the request span itself, held until they are known. "child": the
	// request span is handed on at once, untouched, and its results go on
	// a child span gpu.request (its phase spans under it), the only thing
	// held: the trace reaches the backend seconds sooner, and at 20,000
	// spans/s the collector took a fifth to a quarter less CPU and about
	// 40% less peak memory (docs/benchmarks.md, "Results on a child
	// span").
	ResultsOn string `mapstructure:"results_on"`
	// Rules recognise home-grown inference servers' spans.
	Rules []RuleConfig `mapstructure:"rules"`
	// MaxRequestDuration: a request span longer than this is malformed.
	MaxRequestDuration time.Duration `mapstructure:"max_request_duration"`
	// Bottleneck holds the classifier's thresholds.
	Bottleneck BottleneckConfig `mapstructure:"bottleneck"`
	// Metrics configures the derived metrics emitted in the metrics pipeline.
	Metrics MetricsConfig `mapstructure:"metrics"`
	// Analysis configures the streaming anomaly and load-pattern analysis.
	Analysis AnalysisConfig `mapstructure:"analysis"`
	// Attribution configures how GPU energy is shared between requests.
	Attribution AttributionConfig `mapstructure:"attribution"`
	// ReleaseRetry is how long an enriched batch the next consumer refused
	// (with a retryable error) is offered again, once per release tick,
	// before it is counted refused and let go. Default 30 s: what the
	// collector's exporter queues retry for by default is longer, but a
	// processor holding memory must give up sooner.
	ReleaseRetry time.Duration `mapstructure:"release_retry"`

	_ struct{}
}

// AttributionConfig configures the energy books; docs/attribution.md gives
// the reasoning behind each default.
type AttributionConfig struct {
	// SettleWindow groups spans by arrival: a group opens with the first
	// span after the previous one closed and takes every span arriving
	// within the window; the group is attributed together once the window
	// has passed and its energy is in, so its spans share GPU energy as if
	// they had arrived at once. Default 5 s: spans are held 4.1 s on
	// average (about 2.5 s of it the window's), for a tenth less energy
	// error per request than 2 s in steady serving (docs/attribution.md).
	SettleWindow time.Duration `mapstructure:"settle_window"`
	// Resolution is the width of the bins energy and labels are kept in.
	// Default 100 ms.
	Resolution time.Duration `mapstructure:"resolution"`
	// Horizon is how much GPU time the books keep per GPU. Default 5 min.
	Horizon time.Duration `mapstructure:"horizon"`
	// FinalizeAfter is how far behind a GPU's newest energy its bins become
	// final (booked and counted in gpuviz.gpu.bottleneck.time). Default 30 s.
	FinalizeAfter time.Duration `mapstructure:"finalize_after"`
	// SamplingRatio is the share of requests whose spans reach the
	// processor (head sampling); the rest keep their energy. Default 1.
	SamplingRatio float64 `mapstructure:"sampling_ratio"`
	// WarmupWait is the longest a span is held, after it arrived, while
	// its GPUs' books have not yet learned how a bin's activity predicts
	// its final weight: until then energy is split by the arrival curve,
	// which in a collector's first minute errs several-fold. Held only
	// while the hold is at most half full; 0 holds nothing. Default 45 s:
	// finalize_after, the 10 s of bins the fit needs, and a settle window
	// (docs/attribution.md, "Warming up").
	WarmupWait time.Duration `mapstructure:"warmup_wait"`

	_ struct{}
}

// HistoryConfig bounds the per-GPU timeline.
type HistoryConfig struct {
	MaxGPUs            int           `mapstructure:"max_gpus"`
	MaxPointsPerSignal int           `mapstructure:"max_points_per_signal"`
	Retention          time.Duration `mapstructure:"retention"`
	MaxSpan            time.Duration `mapstructure:"max_span"`
	// AlignGPM learns, per GPU, how late its GPM readings describe it
	// (58-115 ms on an H200), and stamps them back: from the edges of the
	// driver's power samples (gpmlag.go), and until they agree from the
	// spans' prefill windows (prefilllag.go). Default true.
	AlignGPM bool `mapstructure:"align_gpm"`

	_ struct{}
}

// Where a span's results go (Config.ResultsOn).
const (
	ResultsOnRequest = "request" // the request span, held until they are known
	ResultsOnChild   = "child"   // a child span gpu.request; the request span is handed on at once
)

// Matching methods, tried in the configured order.
const (
	MatchPod       = "pod"       // the GPUs the kubelet allocated to the span's pod (k8s.pod.uid, or k8s.pod.name + k8s.namespace.name)
	MatchSlurmJob  = "slurm"     // the GPUs the span's Slurm job (slurm.job.id) held, its own host's first
	MatchAttribute = "attribute" // a span or resource attribute names the GPUs
	MatchProcess   = "process"   // resource process.pid seen on GPUs by the receiver
	MatchHost      = "host"      // every GPU of the span's host.name
)

// MatchConfig says how spans are matched to GPUs.
type MatchConfig struct {
	Order                    []string `mapstructure:"order"`
	GPUIDAttributes          []string `mapstructure:"gpu_id_attributes"`
	GPUIndexAttributes       []string `mapstructure:"gpu_index_attributes"`
	VisibleDevicesAttributes []string `mapstructure:"visible_devices_attributes"`

	_ struct{}
}

// RuleConfig recognises a home-grown server's request spans.
type RuleConfig struct {
	Name                    string `mapstructure:"name"`
	SpanName                string `mapstructure:"span_name"`
	SpanNamePrefix          string `mapstructure:"span_name_prefix"`
	QueueSecondsAttribute   string `mapstructure:"queue_seconds_attribute"`
	PrefillSecondsAttribute string `mapstructure:"prefill_seconds_attribute"`
	DecodeSecondsAttribute  string `mapstructure:"decode_seconds_attribute"`
	InputTokensAttribute    string `mapstructure:"input_tokens_attribute"`
	OutputTokensAttribute   string `mapstructure:"output_tokens_attribute"`
	ModelAttribute          string `mapstructure:"model_attribute"`

	_ struct{}
}

// BottleneckConfig holds the classifier thresholds; see the bottleneck
// package for what each means and why its default is what it is.
type BottleneckConfig struct {
	IdleUtilization        float64 `mapstructure:"idle_utilization"`
	BusySMActivity         float64 `mapstructure:"busy_sm_activity"`
	ComputeTensor          float64 `mapstructure:"compute_tensor"`
	ComputeSM              float64 `mapstructure:"compute_sm"`
	MemoryDRAM             float64 `mapstructure:"memory_dram"`
	MemoryControllerBusy   float64 `mapstructure:"memory_controller_busy"`
	InterconnectFraction   float64 `mapstructure:"interconnect_fraction"`
	MemoryCapacityFraction float64 `mapstructure:"memory_capacity_fraction"`
	ThrottledShare         float64 `mapstructure:"throttled_share"`
	TensorAtLimit          float64 `mapstructure:"tensor_at_limit"`
	DRAMAtLimit            float64 `mapstructure:"dram_at_limit"`
	PowerSwing             float64 `mapstructure:"power_swing"`

	_ struct{}
}

// MetricsConfig configures the derived metrics.
type MetricsConfig struct {
	// Enabled emits bottleneck time, request histograms and analysis
	// metrics in the metrics pipeline.
	Enabled bool `mapstructure:"enabled"`
	// Interval is how often the derived metrics ride along with the metrics
	// passing through.
	Interval time.Duration `mapstructure:"interval"`
	// MaxModels bounds the gen_ai.request.model values the request
	// histograms keep apart; more are folded into "other".
	MaxModels int `mapstructure:"max_models"`
	// IdleExpiry forgets a host's or model's request histograms after they
	// saw no request for this long.
	IdleExpiry time.Duration `mapstructure:"idle_expiry"`
	// Accounting configures the charge-back counters (accounting.go).
	Accounting AccountingConfig `mapstructure:"accounting"`

	_ struct{}
}

// AnalysisConfig configures the streaming analysis.
type AnalysisConfig struct {
	Enabled       bool          `mapstructure:"enabled"`
	Window        time.Duration `mapstructure:"window"`
	MinPoints     int           `mapstructure:"min_points"`
	ZThreshold    float64       `mapstructure:"z_threshold"`
	LowMean       float64       `mapstructure:"low_mean"`
	HighMean      float64       `mapstructure:"high_mean"`
	StableCV      float64       `mapstructure:"stable_cv"`
	FluctuatingCV float64       `mapstructure:"fluctuating_cv"`

	_ struct{}
}

func createDefaultConfig() *Config {
	m := inference.DefaultConfig()
	b := bottleneck.DefaultThresholds()
	a := analysis.DefaultConfig()
	return &Config{
		MaxWait:         20 * time.Second,
		MaxPendingSpans: 200_000,
		// A node-local agent needs a few MiB; the worst case is
		// max_gpus × 17 series × max_points_per_signal × 32.25 B = 1.1 GiB.
		// 2048 points hold about 5.7 minutes of the driver's 6/s samples
		// (41 s of its 20 ms power samples: a longer window's mean power is
		// its energy over its length) and far longer of once-a-scrape
		// readings; a gateway for a large fleet raises max_gpus and, if
		// memory is tight, lowers the points.
		History: HistoryConfig{MaxGPUs: 1024, MaxPointsPerSignal: 2048, Retention: 10 * time.Minute, MaxSpan: 30 * time.Second, AlignGPM: true},
		Match: MatchConfig{
			Order:                    []string{MatchPod, MatchSlurmJob, MatchAttribute, MatchProcess, MatchHost},
			GPUIDAttributes:          m.GPUIDAttributes,
			GPUIndexAttributes:       m.GPUIndexAttributes,
			VisibleDevicesAttributes: m.VisibleDevicesAttributes,
		},
		PhaseSpans:         true,
		ResultsOn:          ResultsOnRequest,
		MaxRequestDuration: m.MaxDuration,
		Bottleneck: BottleneckConfig{
			IdleUtilization: b.IdleUtilization, BusySMActivity: b.BusySMActivity, ComputeTensor: b.ComputeTensor,
			ComputeSM: b.ComputeSM, MemoryDRAM: b.MemoryDRAM, MemoryControllerBusy: b.MemoryControllerBusy,
			InterconnectFraction: b.InterconnectFraction, MemoryCapacityFraction: b.MemoryCapacityFraction,
			ThrottledShare: b.ThrottledShare, TensorAtLimit: b.TensorAtLimit, DRAMAtLimit: b.DRAMAtLimit, PowerSwing: b.PowerSwing,
		},
		Metrics: MetricsConfig{Enabled: true, Interval: 10 * time.Second, MaxModels: 64, IdleExpiry: 10 * time.Minute, Accounting: defaultAccounting()},
		Attribution: AttributionConfig{
			SettleWindow: 5 * time.Second, Resolution: 100 * time.Millisecond, Horizon: 5 * time.Minute,
			FinalizeAfter: 30 * time.Second, SamplingRatio: 1, WarmupWait: 45 * time.Second,
		},
		ReleaseRetry: 30 * time.Second,
		Analysis: AnalysisConfig{
			Enabled: true, Window: a.Window, MinPoints: a.MinPoints, ZThreshold: a.ZThreshold,
			LowMean: a.LowMean, HighMean: a.HighMean, StableCV: a.StableCV, FluctuatingCV: a.FluctuatingCV,
		},
	}
}

// maxHold is the longest a span is held for its GPUs' data: max_wait, or
// two of a slower source's sample spacings, at most two history.max_span
// (hold.wait); a long request's wait stays within it too (hold.ready).
func (cfg *Config) maxHold() time.Duration {
	return max(cfg.MaxWait, 2*cfg.History.MaxSpan)
}

func (cfg *Config) timeline() timeline.Config {
	return timeline.Config{
		MaxGPUs: cfg.History.MaxGPUs, MaxPointsPerSignal: cfg.History.MaxPointsPerSignal,
		Retention: cfg.History.Retention, MaxSpan: cfg.History.MaxSpan,
	}
}

func (cfg *Config) recognizer() inference.Config {
	c := inference.DefaultConfig()
	c.GPUIDAttributes = cfg.Match.GPUIDAttributes
	c.GPUIndexAttributes = cfg.Match.GPUIndexAttributes
	c.VisibleDevicesAttributes = cfg.Match.VisibleDevicesAttributes
	c.MaxDuration = cfg.MaxRequestDuration
	for _, r := range cfg.Rules {
		c.Rules = append(c.Rules, inference.Rule{
			Name: r.Name, SpanName: r.SpanName, SpanNamePrefix: r.SpanNamePrefix,
			QueueSecondsAttribute: r.QueueSecondsAttribute, PrefillSecondsAttribute: r.PrefillSecondsAttribute,
			DecodeSecondsAttribute: r.DecodeSecondsAttribute, InputTokensAttribute: r.InputTokensAttribute,
			OutputTokensAttribute: r.OutputTokensAttribute, ModelAttribute: r.ModelAttribute,
		})
	}
	return c
}

func (cfg *Config) attribution() attribution.Config {
	a := cfg.Attribution
	return attribution.Config{Resolution: a.Resolution, Horizon: a.Horizon, SamplingRatio: a.SamplingRatio,
		TensorAtLimit: cfg.Bottleneck.TensorAtLimit, DRAMAtLimit: cfg.Bottleneck.DRAMAtLimit,
		FinalizeAfter: a.FinalizeAfter, ScoreAge: cfg.maxHold()}
}

func (cfg *Config) thresholds() bottleneck.Thresholds {
	b := cfg.Bottleneck
	return bottleneck.Thresholds{
		IdleUtilization: b.IdleUtilization, BusySMActivity: b.BusySMActivity, ComputeTensor: b.ComputeTensor,
		ComputeSM: b.ComputeSM, MemoryDRAM: b.MemoryDRAM, MemoryControllerBusy: b.MemoryControllerBusy,
		InterconnectFraction: b.InterconnectFraction, MemoryCapacityFraction: b.MemoryCapacityFraction,
		ThrottledShare: b.ThrottledShare, TensorAtLimit: b.TensorAtLimit, DRAMAtLimit: b.DRAMAtLimit, PowerSwing: b.PowerSwing,
	}
}

func (cfg *Config) analysis() analysis.Config {
	a := analysis.DefaultConfig()
	a.Window, a.MinPoints, a.ZThreshold = cfg.Analysis.Window, cfg.Analysis.MinPoints, cfg.Analysis.ZThreshold
	a.LowMean, a.HighMean, a.StableCV, a.FluctuatingCV = cfg.Analysis.LowMean, cfg.Analysis.HighMean, cfg.Analysis.StableCV, cfg.Analysis.FluctuatingCV
	return a
}

// Validate checks the configuration before the processor starts.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("max_wait: %v must be positive (it bounds how long spans are held)", cfg.MaxWait))
	}
	if cfg.MaxPendingSpans < 1 {
		errs = append(errs, fmt.Errorf("max_pending_spans: %d must be at least 1", cfg.MaxPendingSpans))
	}
	errs = append(errs, confpath.Prefixed("history.", cfg.timeline().Validate())...)
	if cfg.History.MaxGPUs > attribution.MaxGroupGPUs {
		errs = append(errs, fmt.Errorf("history.max_gpus: %d must be at most %d (the energy books count GPUs in 16 bits)", cfg.History.MaxGPUs, attribution.MaxGroupGPUs))
	}
	if cfg.ResultsOn != ResultsOnRequest && cfg.ResultsOn != ResultsOnChild {
		errs = append(errs, fmt.Errorf("results_on: %q is not one of %q, %q", cfg.ResultsOn, ResultsOnRequest, ResultsOnChild))
	}
	if len(cfg.Match.Order) == 0 {
		errs = append(errs, errors.New("match.order: name at least one of pod, slurm, attribute, process, host"))
	}
	seen := map[string]bool{}
	for i, m := range cfg.Match.Order {
		switch m {
		case MatchPod, MatchSlurmJob, MatchAttribute, MatchProcess, MatchHost:
		default:
			errs = append(errs, fmt.Errorf("match.order[%d]: %q is not a matching method: use pod, slurm, attribute, process or host", i, m))
		}
		if seen[m] {
			errs = append(errs, fmt.Errorf("match.order[%d]: %q is listed twice", i, m))
		}
		seen[m] = true
	}
	if err := cfg.recognizer().Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, confpath.Prefixed("bottleneck.", cfg.thresholds().Validate())...)
	if cfg.Metrics.Enabled {
		if cfg.Metrics.Interval <= 0 {
			errs = append(errs, fmt.Errorf("metrics.interval: %v must be positive", cfg.Metrics.Interval))
		}
		if cfg.Metrics.MaxModels < 1 {
			errs = append(errs, fmt.Errorf("metrics.max_models: %d must be at least 1", cfg.Metrics.MaxModels))
		}
		if err := cfg.Metrics.Accounting.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.ReleaseRetry < 0 {
		errs = append(errs, fmt.Errorf("release_retry: %v must not be negative", cfg.ReleaseRetry))
	}
	errs = append(errs, confpath.Prefixed("attribution.", cfg.attribution().Validate())...)
	a := cfg.Attribution
	if a.SettleWindow < 0 || (cfg.MaxWait > 0 && a.SettleWindow >= cfg.MaxWait) {
		errs = append(errs, fmt.Errorf("attribution.settle_window: %v must be at least 0 and below max_wait (%v)", a.SettleWindow, cfg.MaxWait))
	}
	if a.FinalizeAfter < a.SettleWindow {
		errs = append(errs, fmt.Errorf("attribution.finalize_after: %v must be at least settle_window (%v)", a.FinalizeAfter, a.SettleWindow))
	}
	if a.Horizon < a.FinalizeAfter+cfg.maxHold() {
		errs = append(errs, fmt.Errorf("attribution.horizon: %v must be at least finalize_after + the longest a span is held, max(max_wait, 2 × history.max_span) (%v)", a.Horizon, a.FinalizeAfter+cfg.maxHold()))
	}
	if cfg.History.Retention < a.Horizon {
		errs = append(errs, fmt.Errorf("history.retention: %v must be at least attribution.horizon (%v): the books' bins are read from the samples it keeps", cfg.History.Retention, a.Horizon))
	}
	if a.WarmupWait < 0 {
		errs = append(errs, fmt.Errorf("attribution.warmup_wait: %v must not be negative", a.WarmupWait))
	} else if a.Horizon < a.FinalizeAfter+a.WarmupWait {
		errs = append(errs, fmt.Errorf("attribution.horizon: %v must be at least finalize_after + warmup_wait (%v)", a.Horizon, a.FinalizeAfter+a.WarmupWait))
	}
	if cfg.Metrics.Enabled && cfg.Metrics.IdleExpiry < cfg.Metrics.Interval {
		errs = append(errs, fmt.Errorf("metrics.idle_expiry: %v must be at least metrics.interval (%v)", cfg.Metrics.IdleExpiry, cfg.Metrics.Interval))
	}
	if cfg.Analysis.Enabled {
		errs = append(errs, confpath.Prefixed("analysis.", cfg.analysis().Validate())...)
	}
	return errors.Join(errs...)
}
