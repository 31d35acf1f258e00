// Package promnames says which Prometheus series the distribution's metrics
// become, so that dashboards, alert rules and end-to-end checks can be
// tested against what really exists.
//
// The names follow the collector's prometheus exporter (contrib v0.165.1)
// in its default translation: the exporter's factory sets
// add_metric_suffixes: true and no translation_strategy, which
// getTranslationConfiguration (exporter/prometheusexporter/collector.go)
// turns into otlptranslator.MetricNamer{WithMetricSuffixes: true,
// UTF8Allowed: false}; the metric type comes from
// prometheusremotewrite.TranslatorMetricFromOtelMetric (gauge, monotonic or
// non-monotonic sum, histogram). Prometheus implements the rules below in
// github.com/prometheus/otlptranslator v1.0.0, metric_namer.go
// (normalizeName, addUnitTokens) and unit_namer.go (buildUnitSuffixes,
// cleanUpUnit):
//
//   - the name is split into tokens at every character outside [a-zA-Z0-9:]
//     (dots and underscores alike) and the tokens are joined with "_";
//   - the unit's main part maps through a fixed table (s→seconds, By→bytes,
//     W→watts, J→joules, Cel→celsius, Hz→hertz, "1"→nothing, ...; unknown
//     units are kept as they are, cleaned to [a-zA-Z0-9:_]); a unit
//     containing "{" or "}" (an annotation such as {error} or {token})
//     adds nothing; the part after "/" becomes per_<unit> (s→per_second);
//     a suffix is not added again when the name already has it as a token;
//   - a monotonic sum gets _total (once); a GAUGE with unit "1" gets _ratio;
//     a non-monotonic sum with unit "1" (hw.status) gets neither;
//   - a histogram is stored as <name>_bucket, <name>_sum and <name>_count.
//
// The exporter writes no _created series (the golden test holds names taken
// from a real scrape of otelcol-gpuviz).
package promnames // import "github.com/gpuviz/gpuviz/internal/promnames"

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Kind is an OpenTelemetry instrument kind, as far as naming cares.
type Kind int

// The kinds of metric the distribution emits.
const (
	Gauge         Kind = iota
	Counter            // a monotonic sum
	UpDownCounter      // a non-monotonic sum
	Histogram
)

func (k Kind) String() string {
	switch k {
	case Gauge:
		return "gauge"
	case Counter:
		return "counter"
	case UpDownCounter:
		return "updowncounter"
	case Histogram:
		return "histogram"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Metric is one OpenTelemetry metric as declared: name, unit, and kind.
type Metric struct {
	Name, Unit string
	Kind       Kind
}

// metadataFile is the part of an mdatagen metadata.yaml that names metrics.
type metadataFile struct {
	Metrics map[string]struct {
		Unit  string     `yaml:"unit"`
		Gauge *yaml.Node `yaml:"gauge"`
		Sum   *struct {
			Monotonic bool `yaml:"monotonic"`
		} `yaml:"sum"`
		Histogram *yaml.Node `yaml:"histogram"`
	} `yaml:"metrics"`
}

// FromMetadata reads an mdatagen metadata.yaml's metrics section, sorted by
// name. Every metric must have a unit and exactly one of gauge, sum or
// histogram.
func FromMetadata(path string) ([]Metric, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f metadataFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Metrics) == 0 {
		return nil, fmt.Errorf("%s: no metrics section", path)
	}
	out := make([]Metric, 0, len(f.Metrics))
	for name, m := range f.Metrics {
		var kinds []Kind
		if m.Gauge != nil {
			kinds = append(kinds, Gauge)
		}
		if m.Sum != nil {
			if m.Sum.Monotonic {
				kinds = append(kinds, Counter)
			} else {
				kinds = append(kinds, UpDownCounter)
			}
		}
		if m.Histogram != nil {
			kinds = append(kinds, Histogram)
		}
		if len(kinds) != 1 {
			return nil, fmt.Errorf("%s: metric %s: want exactly one of gauge, sum, histogram", path, name)
		}
		if m.Unit == "" {
			return nil, fmt.Errorf("%s: metric %s: no unit", path, name)
		}
		out = append(out, Metric{Name: name, Unit: m.Unit, Kind: kinds[0]})
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Derived lists the gpuviz processor's derived metrics (name, unit, kind),
// as the processor emits them (processor/gpuvizprocessor/metadata.yaml and
// histograms.go); the processor's tests fail when the two drift apart.
func Derived() []Metric {
	return []Metric{
		{Name: "gpuviz.accounting.energy", Unit: "J", Kind: Counter},
		{Name: "gpuviz.accounting.gpu_time", Unit: "s", Kind: Counter},
		{Name: "gpuviz.gpu.anomaly", Unit: "1", Kind: Gauge},
		{Name: "gpuviz.gpu.bottleneck.state", Unit: "1", Kind: Gauge},
		{Name: "gpuviz.gpu.bottleneck.time", Unit: "s", Kind: Counter},
		{Name: "gpuviz.gpu.energy", Unit: "J", Kind: Counter},
		{Name: "gpuviz.gpu.energy.correction", Unit: "J", Kind: UpDownCounter},
		{Name: "gpuviz.gpu.load_pattern", Unit: "1", Kind: Gauge},
		{Name: "gpuviz.request.energy", Unit: "J", Kind: Histogram},
		{Name: "gpuviz.request.energy_per_output_token", Unit: "J/{token}", Kind: Histogram},
		{Name: "gpuviz.request.gpu_busy_time", Unit: "s", Kind: Histogram},
	}
}

// unitMap is otlptranslator's table of OpenTelemetry (UCUM) units.
var unitMap = map[string]string{
	"d": "days", "h": "hours", "min": "minutes", "s": "seconds",
	"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds",
	"By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
	"TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes",
	"TBy": "terabytes",
	"m":   "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",
	"Cel": "celsius", "Hz": "hertz", "1": "", "%": "percent",
}

// perUnitMap is otlptranslator's table for the unit after "/".
var perUnitMap = map[string]string{
	"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year",
}

func validChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ':'
}

// cleanUnit replaces characters outside [a-zA-Z0-9:] with "_", collapses
// runs of "_" and drops a leading one.
func cleanUnit(u string) string {
	u = strings.Map(func(r rune) rune {
		if validChar(r) {
			return r
		}
		return '_'
	}, u)
	for strings.Contains(u, "__") {
		u = strings.ReplaceAll(u, "__", "_")
	}
	return strings.TrimPrefix(u, "_")
}

// unitSuffixes returns the main and "per" suffixes of a unit.
func unitSuffixes(unit string) (main, per string) {
	parts := strings.SplitN(unit, "/", 2)
	if m := strings.TrimSpace(parts[0]); m != "" && !strings.ContainsAny(m, "{}") {
		main = m
		if v, ok := unitMap[m]; ok {
			main = v
		}
	}
	if len(parts) == 2 {
		if p := strings.TrimSpace(parts[1]); p != "" && !strings.ContainsAny(p, "{}") {
			per = p
			if v, ok := perUnitMap[p]; ok {
				per = v
			}
			per = "per_" + per
		}
	}
	return cleanUnit(main), cleanUnit(per)
}

// Name returns the metric family name the exporter gives m: for a counter
// it ends in _total, for a histogram it is the base of the _bucket, _sum
// and _count series.
func Name(m Metric) string {
	tokens := strings.FieldsFunc(m.Name, func(r rune) bool { return !validChar(r) })
	main, per := unitSuffixes(m.Unit)
	if slices.Contains(tokens, main) {
		main = ""
	}
	if per == "per_" {
		per = ""
	} else {
		per = strings.TrimSuffix(per, "_")
		if slices.Contains(tokens, per) {
			per = ""
		}
	}
	if per != "" {
		main = strings.TrimSuffix(main, "_")
	}
	if main != "" {
		tokens = append(tokens, main)
	}
	if per != "" {
		tokens = append(tokens, per)
	}
	if m.Kind == Counter {
		tokens = append(slices.DeleteFunc(tokens, func(t string) bool { return t == "total" }), "total")
	}
	if m.Unit == "1" && m.Kind == Gauge {
		tokens = append(slices.DeleteFunc(tokens, func(t string) bool { return t == "ratio" }), "ratio")
	}
	name := strings.Join(tokens, "_")
	if name != "" && name[0] >= '0' && name[0] <= '9' {
		name = "_" + name
	}
	return name
}

// Prometheus returns the series names Prometheus stores for m: one name,
// or for a histogram its _bucket, _sum and _count series.
func Prometheus(m Metric) []string {
	n := Name(m)
	if m.Kind == Histogram {
		return []string{n + "_bucket", n + "_sum", n + "_count"}
	}
	return []string{n}
}

// Set returns every series name of ms, for membership tests.
func Set(ms ...[]Metric) map[string]Metric {
	out := map[string]Metric{}
	for _, list := range ms {
		for _, m := range list {
			for _, n := range Prometheus(m) {
				out[n] = m
			}
		}
	}
	return out
}
