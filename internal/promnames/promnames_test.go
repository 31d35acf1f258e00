package promnames

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	metadataPath = "../../receiver/gpuvizreceiver/metadata.yaml"
)

func TestPrometheus(t *testing.T) {
	tests := []struct {
		m    Metric
		want []string
	}{
		// gauges: unit suffix; unit "1" adds _ratio
		{Metric{"hw.power", "W", Gauge}, []string{"hw_power_watts"}},
		{Metric{"hw.temperature", "Cel", Gauge}, []string{"hw_temperature_celsius"}},
		{Metric{"hw.gpu.utilization", "1", Gauge}, []string{"hw_gpu_utilization_ratio"}},
		{Metric{"nvidia.gpu.info", "1", Gauge}, []string{"nvidia_gpu_info_ratio"}},
		{Metric{"nvidia.gpu.clock.frequency", "Hz", Gauge}, []string{"nvidia_gpu_clock_frequency_hertz"}},
		{Metric{"nvidia.gpu.samples.sm_clock", "Hz", Gauge}, []string{"nvidia_gpu_samples_sm_clock_hertz"}},
		{Metric{"nvidia.gpu.pcie.throughput", "By/s", Gauge}, []string{"nvidia_gpu_pcie_throughput_bytes_per_second"}},
		{Metric{"nvidia.gpu.pcie.link.width", "{lane}", Gauge}, []string{"nvidia_gpu_pcie_link_width"}},
		{Metric{"nvidia.gpu.power.limit", "W", Gauge}, []string{"nvidia_gpu_power_limit_watts"}},
		// counters: unit suffix, then _total; annotations add nothing
		{Metric{"hw.energy", "J", Counter}, []string{"hw_energy_joules_total"}},
		{Metric{"hw.errors", "{error}", Counter}, []string{"hw_errors_total"}},
		{Metric{"hw.gpu.io", "By", Counter}, []string{"hw_gpu_io_bytes_total"}},
		{Metric{"nvidia.gpu.throttle.time", "s", Counter}, []string{"nvidia_gpu_throttle_time_seconds_total"}},
		{Metric{"nvidia.gpu.xid.errors", "{error}", Counter}, []string{"nvidia_gpu_xid_errors_total"}},
		{Metric{"nvidia.gpu.memory.remapped_rows", "{row}", Counter}, []string{"nvidia_gpu_memory_remapped_rows_total"}},
		{Metric{"gpuviz.gpu.bottleneck.time", "s", Counter}, []string{"gpuviz_gpu_bottleneck_time_seconds_total"}},
		// up-down counters: unit suffix; neither _total nor, for "1", _ratio
		{Metric{"hw.gpu.memory.usage", "By", UpDownCounter}, []string{"hw_gpu_memory_usage_bytes"}},
		{Metric{"hw.gpu.memory.limit", "By", UpDownCounter}, []string{"hw_gpu_memory_limit_bytes"}},
		{Metric{"hw.status", "1", UpDownCounter}, []string{"hw_status"}},
		{Metric{"gpuviz.gpu.energy.correction", "J", UpDownCounter}, []string{"gpuviz_gpu_energy_correction_joules"}},
		// histograms
		{Metric{"gpuviz.request.energy", "J", Histogram},
			[]string{"gpuviz_request_energy_joules_bucket", "gpuviz_request_energy_joules_sum", "gpuviz_request_energy_joules_count"}},
		{Metric{"gpuviz.request.energy_per_output_token", "J/{token}", Histogram},
			[]string{"gpuviz_request_energy_per_output_token_joules_bucket", "gpuviz_request_energy_per_output_token_joules_sum", "gpuviz_request_energy_per_output_token_joules_count"}},
		{Metric{"gpuviz.request.gpu_busy_time", "s", Histogram},
			[]string{"gpuviz_request_gpu_busy_time_seconds_bucket", "gpuviz_request_gpu_busy_time_seconds_sum", "gpuviz_request_gpu_busy_time_seconds_count"}},
		// translator corner cases
		{Metric{"http.server.duration", "ms", Histogram},
			[]string{"http_server_duration_milliseconds_bucket", "http_server_duration_milliseconds_sum", "http_server_duration_milliseconds_count"}},
		{Metric{"process.cpu.time", "s", Counter}, []string{"process_cpu_time_seconds_total"}},
		{Metric{"requests.total", "1", Counter}, []string{"requests_total"}},            // _total once, no _ratio
		{Metric{"cache.hit.ratio", "1", Gauge}, []string{"cache_hit_ratio"}},            // _ratio once
		{Metric{"latency.seconds", "s", Gauge}, []string{"latency_seconds"}},            // unit suffix once
		{Metric{"disk.rate", "By/min", Gauge}, []string{"disk_rate_bytes_per_min"}},     // unknown per unit kept
		{Metric{"queue.size", "{request}/s", Gauge}, []string{"queue_size_per_second"}}, // annotated main unit
		{Metric{"load", "%", Gauge}, []string{"load_percent"}},
		{Metric{"x__y..z", "", Gauge}, []string{"x_y_z"}},
		{Metric{"2xx.responses", "", Counter}, []string{"_2xx_responses_total"}},
		// unit edge cases, each name as otlptranslator v1.0.0's MetricNamer
		// (WithMetricSuffixes) builds it
		{Metric{"a", "x_/s", Gauge}, []string{"a_x_per_second"}},      // main unit's trailing "_" dropped before a per unit
		{Metric{"a", "s/_", Gauge}, []string{"a_seconds"}},            // a per unit cleaned to nothing adds nothing
		{Metric{"a", "By/x_", Gauge}, []string{"a_bytes_per_x"}},      // per unit's trailing "_" dropped
		{Metric{"a", "_By", Gauge}, []string{"a_By"}},                 // leading "_" of a cleaned unit dropped
		{Metric{"a", " s ", Gauge}, []string{"a_seconds"}},            // unit trimmed before the table
		{Metric{"a", "{req}/{s}", Gauge}, []string{"a"}},              // annotations on both sides
		{Metric{"a", "/s", Gauge}, []string{"a_per_second"}},          // a per unit alone
		{Metric{"a", "1/s", Counter}, []string{"a_per_second_total"}}, // "1" adds nothing, not even for a counter
		{Metric{"a", "By/s/x", Gauge}, []string{"a_bytes_per_s_x"}},   // split at the first "/" only
		{Metric{"a.bytes", "By/s", Gauge}, []string{"a_bytes_per_second"}},
		{Metric{"a", "1", Histogram}, []string{"a_bucket", "a_sum", "a_count"}}, // _ratio for gauges only
		{Metric{"a.ratio", "1", Counter}, []string{"a_ratio_total"}},
		{Metric{"a.total", "s", Gauge}, []string{"a_total_seconds"}}, // _total moved last for counters only
		{Metric{"a", "KiBy", Gauge}, []string{"a_kibibytes"}},
		{Metric{"a", "us", Gauge}, []string{"a_microseconds"}},
		{Metric{"a", "d/w", Gauge}, []string{"a_days_per_week"}},
		{Metric{"a", "By/h", Gauge}, []string{"a_bytes_per_hour"}},
		{Metric{"a", "my unit", Gauge}, []string{"a_my_unit"}}, // an unknown unit kept, cleaned
		{Metric{"a-b", "é", Gauge}, []string{"a_b"}},           // a unit cleaned to nothing
		{Metric{"9", "s", Gauge}, []string{"_9_seconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.m.Name+"/"+tt.m.Unit+"/"+tt.m.Kind.String(), func(t *testing.T) {
			assert.Equal(t, tt.want, Prometheus(tt.m))
		})
	}
}

func TestFromMetadata(t *testing.T) {
	ms, err := FromMetadata(metadataPath)
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	assert.True(t, slices.IsSortedFunc(ms, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) }))
	byName := map[string]Metric{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	for _, want := range []Metric{
		{"hw.energy", "J", Counter},
		{"hw.power", "W", Gauge},
		{"hw.status", "1", UpDownCounter},
		{"hw.gpu.memory.usage", "By", UpDownCounter},
		{"hw.errors", "{error}", Counter},
		{"nvidia.gpu.nvlink.throughput", "By/s", Gauge},
	} {
		assert.Equal(t, want, byName[want.Name])
	}

	// Every unit and kind the receiver uses is one the table above covers.
	seen := map[string]bool{}
	for _, m := range append(ms, Derived()...) {
		seen[m.Unit+" "+m.Kind.String()] = true
	}
	for combo := range seen {
		assert.Contains(t, []string{
			"1 gauge", "1 updowncounter", "W gauge", "J counter", "J updowncounter", "Cel gauge", "Hz gauge", "By/s gauge",
			"By counter", "By updowncounter", "s counter", "{error} counter", "{row} counter",
			"{page} counter", "{replay} counter", "{lane} gauge", "J histogram", "J/{token} histogram",
			"s histogram",
		}, combo, "a unit/kind combination TestPrometheus does not cover")
	}

	dir := t.TempDir()
	for name, body := range map[string]string{
		"nometrics.yaml": "type: x\n",
		"twokinds.yaml":  "metrics:\n  a:\n    unit: s\n    gauge: {value_type: double}\n    sum: {monotonic: true}\n",
		"nokind.yaml":    "metrics:\n  a:\n    unit: s\n",
		"nounit.yaml":    "metrics:\n  a:\n    gauge: {value_type: double}\n",
		"bad.yaml":       "metrics: [",
	} {
		p := dir + "/" + name
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		_, err := FromMetadata(p)
		assert.Error(t, err, name)
	}
	_, err = FromMetadata(dir + "/missing.yaml")
	assert.Error(t, err)
}

// TestGoldenScrape compares the names with a real scrape of otelcol-gpuviz
// (testdata/exporter-v0.165.1.txt): every family there is the name of a
// declared metric of the right type, and every series there is in Set.
func TestGoldenScrape(t *testing.T) {
	ms, err := FromMetadata(metadataPath)
	require.NoError(t, err)
	all := append(ms, Derived()...)
	families := map[string]Metric{}
	for _, m := range all {
		families[strings.TrimSuffix(Name(m), "_total")] = m
	}
	known := Set(ms, Derived())

	f, err := os.Open("testdata/exporter-v0.165.1.txt")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	var nFamilies, nSeries int
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		require.Len(t, fields, 2, line)
		if fields[0] == "series" {
			nSeries++
			assert.Contains(t, known, fields[1], "a scraped series promnames does not know")
			continue
		}
		nFamilies++
		m, ok := families[fields[0]]
		if !assert.True(t, ok, "scraped family %s is no declared metric's name", fields[0]) {
			continue
		}
		want := map[Kind]string{Gauge: "gauge", UpDownCounter: "gauge", Counter: "counter", Histogram: "histogram"}[m.Kind]
		assert.Equal(t, want, fields[1], "type of %s (%s)", fields[0], m.Name)
	}
	require.NoError(t, sc.Err())
	assert.Greater(t, nFamilies, 40)
	assert.Greater(t, nSeries, 40)
}

func TestInExpression(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`hw_power_watts`, []string{"hw_power_watts"}},
		{`rate(hw_energy_joules_total[5m])`, []string{"hw_energy_joules_total"}},
		{`sum by (hw_id) (rate(hw_gpu_io_bytes_total{network_io_direction="receive"}[$__rate_interval]))`,
			[]string{"hw_gpu_io_bytes_total"}},
		{`sum(rate(x_total[1h30m])) without (instance, job)`, []string{"x_total"}},
		{`histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))`, []string{"x_bucket"}},
		{`histogram_quantile(0.5, sum by (le, gen_ai_request_model) (rate(gpuviz_request_energy_joules_bucket{gpuviz_bottleneck=~"$bottleneck"}[5m])))`,
			[]string{"gpuviz_request_energy_joules_bucket"}},
		{`label_replace(hw_power_watts, "gpu", "$1", "hw_name", "GPU (.*)")`, []string{"hw_power_watts"}},
		{`hw_temperature_celsius offset 1h > 85`, []string{"hw_temperature_celsius"}},
		{`hw_temperature_celsius offset -5m`, []string{"hw_temperature_celsius"}},
		{`hw_temperature_celsius @ 1609746000`, []string{"hw_temperature_celsius"}},
		{`hw_temperature_celsius @ start()`, []string{"hw_temperature_celsius"}},
		{`hw_power_watts / on(hw_id) group_left nvidia_gpu_power_limit_watts > 0.95`,
			[]string{"hw_power_watts", "nvidia_gpu_power_limit_watts"}},
		{`avg by (hw_id) (nvidia_gpu_sm_activity_ratio) * on(hw_id) group_left(hw_model, hw_name) nvidia_gpu_info_ratio`,
			[]string{"nvidia_gpu_sm_activity_ratio", "nvidia_gpu_info_ratio"}},
		{`a > bool 1 and b or c unless d`, []string{"a", "b", "c", "d"}},
		{`a == 1 AND ON (x) b`, []string{"a", "b"}},
		{`SUM BY (hw_id) (a) / ignoring(x) group_right(y) b`, []string{"a", "b"}},
		{`topk(5, max_over_time(a[10m:1m]))`, []string{"a"}},
		{`count_values("v", a) + quantile(0.9, b) + count(c) + group(d) + stddev(e) + limitk(1, f)`,
			[]string{"a", "b", "c", "d", "e", "f"}},
		{`absent(up{job="gpuviz"}) or vector(0) + time()`, []string{"up"}},
		{`{__name__="hw_power_watts", hw_id="x"}`, []string{"hw_power_watts"}},
		{`{__name__=~"hw_.*"}`, nil},
		{`sum(a{l="}"}) by (hw_id) # a comment naming b_total`, []string{"a"}},
		{`a{l='x"y', m=~"z\"}"} * b`, []string{"a", "b"}},
		{`a + inf - NaN + 1e3 + 0x1f + .5`, []string{"a"}},
		{"rate(a[${__interval}]) * $scale + ${var:csv} + [[old]]", []string{"a"}},
		{`sum by (hw_name) (rate(a[5m])) / sum by (hw_name) (rate(a[5m]))`, []string{"a"}},
		{`increase(nvidia_gpu_xid_errors_total[5m]) > 0 or (nvidia_gpu_xid_errors_total unless nvidia_gpu_xid_errors_total offset 5m)`,
			[]string{"nvidia_gpu_xid_errors_total"}},
		{`job:gpu_power:sum`, []string{"job:gpu_power:sum"}},
		{``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			assert.Equal(t, tt.want, InExpression(tt.expr))
		})
	}
}

func FuzzInExpression(f *testing.F) {
	for _, s := range []string{`sum by (a) (rate(b[5m]))`, `{__name__="x"}`, `a{b="c`, `$`, `[[`, `"`, `(((`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, n := range InExpression(s) {
			if n == "" || !identStart(n[0]) && !strings.Contains(s, `__name__`) {
				t.Fatalf("InExpression(%q) returned %q", s, n)
			}
		}
	})
}
