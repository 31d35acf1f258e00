package gpuvizprocessor

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/gpucheck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

// A hardware check recorded on a real H200 (scripts/gpu-check, 2026-12-04,
// driver 580.159.04; docs/hardware.md): the GPU metrics the processor
// reads, as the collector exported them, the request spans the workload
// sent (the processor's own attributes removed) and the workload's
// reference energy per request, integrated from instant power polled every
// 10 ms. The collector read the energy counter on every 250 ms tick
// (pertick) or on flush ticks (perflush), and on flush ticks with the
// driver's 20 ms power samples drained too (samples). The first two
// runs' references cover the request's whole window, its queue included;
// the third's start at prefill and give the queue's apart (Queue).
type hardwareRun struct {
	Points []recordedPoint `json:"points"`
	Spans  []recordedSpan  `json:"spans"`
	// ReferenceSource is what the references integrate: instant power
	// polled every 10 ms (the first two runs; absent) or the driver's
	// power samples (the third), which follow the energy counter within 1%
	// a second.
	ReferenceSource string            `json:"reference_source"`
	Requests        []recordedRequest `json:"requests"`
}

type recordedRequest struct {
	ID           string   `json:"id"`
	Kind         string   `json:"kind"`
	SpanID       string   `json:"span_id"`
	Start        int64    `json:"start_unix_nano"`
	PrefillStart int64    `json:"prefill_start_unix_nano"`
	Batch        int      `json:"batch"`
	Reference    float64  `json:"reference_energy_j"`
	Queue        *float64 `json:"reference_queue_energy_j"`
}

type recordedPoint struct {
	Metric string            `json:"metric"`
	Attrs  map[string]string `json:"attributes"`
	Time   int64             `json:"time_unix_nano"`
	Value  float64           `json:"value"`
}

type recordedSpan struct {
	Name    string         `json:"name"`
	TraceID string         `json:"trace_id"`
	SpanID  string         `json:"span_id"`
	Start   int64          `json:"start_unix_nano"`
	End     int64          `json:"end_unix_nano"`
	Attrs   map[string]any `json:"attributes"`
}

func loadHardwareRun(t *testing.T, name string) hardwareRun {
	t.Helper()
	f, err := os.Open("testdata/h200/gpucheck-" + name + ".json.gz")
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	var run hardwareRun
	require.NoError(t, json.NewDecoder(zr).Decode(&run))
	return run
}

// replayHardwareRun feeds a recorded run through the processor with its
// default configuration (changed by mod, if not nil), on a virtual clock in
// 50 ms steps: each metric point at its timestamp, each span 100 ms after
// it ended. It returns the attributes the processor gave each span, by
// span ID, and the processor.
func replayHardwareRun(t *testing.T, run hardwareRun, mod func(*Config)) (map[string]pcommon.Map, *core) {
	t.Helper()
	c, now, sink := virtualCore(t, func(cfg *Config) {
		cfg.Attribution.WarmupWait = createDefaultConfig().Attribution.WarmupWait
		if mod != nil {
			mod(cfg)
		}
	})
	points, spans := run.Points, run.Spans
	slices.SortStableFunc(points, func(a, b recordedPoint) int { return cmp.Compare(a.Time, b.Time) })
	slices.SortStableFunc(spans, func(a, b recordedSpan) int { return cmp.Compare(a.End, b.End) })
	const step, spanDelay = int64(50 * time.Millisecond), int64(100 * time.Millisecond)
	end := max(points[len(points)-1].Time, spans[len(spans)-1].End) + int64(2*time.Minute)
	pi, si := 0, 0
	for at := points[0].Time; at <= end; at += step {
		*now = time.Unix(0, at)
		if pi < len(points) && points[pi].Time <= at {
			md := pmetric.NewMetrics()
			rm := md.ResourceMetrics().AppendEmpty()
			rm.Resource().Attributes().PutStr("host.name", "h200-replay")
			ms := rm.ScopeMetrics().AppendEmpty().Metrics()
			for ; pi < len(points) && points[pi].Time <= at; pi++ {
				p := points[pi]
				m := ms.AppendEmpty()
				m.SetName(p.Metric)
				dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
				dp.SetTimestamp(pcommon.Timestamp(p.Time))
				dp.SetDoubleValue(p.Value)
				for k, v := range p.Attrs {
					dp.Attributes().PutStr(k, v)
				}
			}
			c.ingest.consume(context.Background(), md)
		}
		if si < len(spans) && spans[si].End+spanDelay <= at {
			td := ptrace.NewTraces()
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("host.name", "h200-replay")
			ss := rs.ScopeSpans().AppendEmpty().Spans()
			for ; si < len(spans) && spans[si].End+spanDelay <= at; si++ {
				s := spans[si]
				sp := ss.AppendEmpty()
				sp.SetName(s.Name)
				sp.SetKind(ptrace.SpanKindServer)
				var tid pcommon.TraceID
				var sid pcommon.SpanID
				require.Equal(t, len(tid), unhex(t, tid[:], s.TraceID))
				require.Equal(t, len(sid), unhex(t, sid[:], s.SpanID))
				sp.SetTraceID(tid)
				sp.SetSpanID(sid)
				sp.SetStartTimestamp(pcommon.Timestamp(s.Start))
				sp.SetEndTimestamp(pcommon.Timestamp(s.End))
				for k, v := range s.Attrs {
					putJSONAttr(sp.Attributes(), k, v)
				}
			}
			require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		}
		c.tick(*now)
	}
	out := map[string]pcommon.Map{}
	for _, td := range sink.AllTraces() {
		forEachSpan(td, func(sp ptrace.Span) {
			if _, ok := sp.Attributes().Get("gpuviz.energy"); ok {
				out[sp.SpanID().String()] = sp.Attributes()
			}
		})
	}
	return out, c
}

func unhex(t *testing.T, dst []byte, s string) int {
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return copy(dst, b)
}

// putJSONAttr sets a span attribute as OTLP JSON decoded it: whole numbers
// are the workload's integer attributes (token counts), except latencies.
func putJSONAttr(m pcommon.Map, k string, v any) {
	switch x := v.(type) {
	case string:
		m.PutStr(k, x)
	case bool:
		m.PutBool(k, x)
	case float64:
		if x == math.Trunc(x) && !strings.Contains(k, "latency") {
			m.PutInt(k, int64(x))
		} else {
			m.PutDouble(k, x)
		}
	case []any:
		s := m.PutEmptySlice(k)
		for _, e := range x {
			s.AppendEmpty().SetStr(fmt.Sprint(e))
		}
	}
}

// sentTokens gives the recorded synthetic spans the token counts
// scripts/gpu-requests.py now sends for the same GPU time (4,096 prompt
// tokens a second of prefill, an output token per 30 ms of decode) instead
// of the 1 and 1 it sent then, which said nothing about the work: once the
// books had learned how cost shows in activity, they gave those prefills a
// third of their energy (docs/hardware.md).
func sentTokens(run *hardwareRun) {
	for _, s := range run.Spans {
		if s.Attrs["gen_ai.request.model"] != "gpucheck-synthetic" {
			continue
		}
		prefill, _ := s.Attrs["gen_ai.latency.time_in_model_prefill"].(float64)
		decode, _ := s.Attrs["gen_ai.latency.time_in_model_decode"].(float64)
		s.Attrs["gen_ai.usage.prompt_tokens"] = math.Round(prefill * 4096)
		s.Attrs["gen_ai.usage.completion_tokens"] = max(1, math.Round(decode/0.03))
	}
}

// queueEnergy is the energy of a request's queue [from, to] by the
// recorded hw.power points whose stretch (the 250 ms tick before each) lies
// inside it: the first runs' references include the queues, which the
// processor gives no energy, and the GPU idles through them.
func queueEnergy(t *testing.T, run hardwareRun, from, to int64) float64 {
	if to <= from {
		return 0
	}
	var sum float64
	var n int
	for _, p := range run.Points {
		if p.Metric == "hw.power" && p.Time-int64(250*time.Millisecond) >= from && p.Time <= to {
			sum += p.Value
			n++
		}
	}
	require.NotZero(t, n, "a power point inside the queue")
	return sum / float64(n) * float64(to-from) / 1e9
}

// referenceEnergy is request q's reference from prefill on: the queue,
// which takes no energy, taken out of the first runs' references.
func referenceEnergy(t *testing.T, run hardwareRun, q recordedRequest) float64 {
	if q.Queue != nil {
		return q.Reference
	}
	return q.Reference - queueEnergy(t, run, q.Start, q.PrefillStart)
}

// driverPowerSamples is how gpu-requests.py names the driver's power
// sample buffer as its reference's source.
const driverPowerSamples = "nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)"

// TestHardwareRunReplays: the processor, on what a real H200 measured,
// gives each synthetic request (2 s of bf16 GEMMs, 4 s of HBM copies, alone
// on the GPU) its energy within gpu-check's 5% of the workload's own
// reference, whether the energy counter was read every tick or every
// second, and each batch of four generate requests (1-1.5 s on a small
// model, near idle power) its energy within 5% where the reference is the
// driver's power samples. Against the first runs' polled instant power,
// which misses short bursts (docs/hardware.md), the batches are logged,
// not asserted; so is each request of a batch, whose share is not measured.
//
// samples_1s is the third run as a 1 s tick would have read it (retick):
// its batches are asserted as the run's, its synthetic requests and their
// labels logged. Its decodes read memory_bound for only 0.72-0.92 of their
// time (0.83-0.85 at 250 ms), which is why the default tick stays 250 ms
// (docs/hardware.md, "run 3 re-read at a 1 s tick").
func TestHardwareRunReplays(t *testing.T) {
	for _, name := range []string{"pertick", "perflush", "samples", "samples_1s"} {
		t.Run(name, func(t *testing.T) {
			run := loadHardwareRun(t, strings.TrimSuffix(name, "_1s"))
			coarse := strings.HasSuffix(name, "_1s")
			if coarse {
				run = retick(t, run)
			}
			sentTokens(&run)
			got, _ := replayHardwareRun(t, run, nil)
			batches := map[string][2]float64{}
			for _, q := range run.Requests {
				attrs, ok := got[q.SpanID]
				if !assert.True(t, ok, "%s enriched", q.ID) {
					continue
				}
				e := doubleAttr(attrs, "gpuviz.energy")
				ref := referenceEnergy(t, run, q)
				t.Logf("%-14s %8.1f J vs %8.1f J (%+.1f%%)", q.ID, e, ref, 100*(e/ref-1))
				switch {
				case q.Kind == gpucheck.KindSynthetic && coarse:
					for _, ph := range []string{"prefill", "decode"} {
						names := phaseAttrNames(ph)
						l, _ := attrs.Get(names.bottleneck)
						t.Logf("%-14s %s %s %.2f of its time", q.ID, ph, l.Str(), doubleAttr(attrs, names.share))
					}
				case q.Kind == gpucheck.KindSynthetic:
					assert.InEpsilon(t, ref, e, gpucheck.MaxEnergyError, q.ID)
					if run.ReferenceSource == driverPowerSamples {
						// With the power samples, bottleneck rule 0 places
						// each bin within its tick: the GEMMs, held at the
						// 700 W cap, stay power_throttled and the copies
						// memory_bound (0.91-0.95 and 0.85 of their time
						// before rule 0).
						assertPhaseLabel(t, attrs, "prefill", bottleneck.PowerThrottled, 0.9, q.ID)
						assertPhaseLabel(t, attrs, "decode", bottleneck.MemoryBound, 0.8, q.ID)
					}
				default:
					b := q.ID[:strings.LastIndex(q.ID, "-")]
					batches[b] = [2]float64{batches[b][0] + e, batches[b][1] + ref}
				}
			}
			for _, b := range slices.Sorted(maps.Keys(batches)) {
				t.Logf("%-14s %8.1f J vs %8.1f J (%+.1f%%), the batch", b, batches[b][0], batches[b][1], 100*(batches[b][0]/batches[b][1]-1))
				if run.ReferenceSource == driverPowerSamples {
					assert.InEpsilon(t, batches[b][1], batches[b][0], gpucheck.MaxEnergyError, b)
				}
			}
		})
	}
}

func doubleAttr(m pcommon.Map, k string) float64 {
	v, _ := m.Get(k)
	return v.Double()
}

// assertPhaseLabel asserts a request span's label of one phase and that it
// held at least share of the phase's GPU time.
func assertPhaseLabel(t *testing.T, attrs pcommon.Map, phase string, want bottleneck.Label, share float64, id string) {
	t.Helper()
	names := phaseAttrNames(phase)
	l, _ := attrs.Get(names.bottleneck)
	assert.Equal(t, string(want), l.Str(), "%s: %s label", id, phase)
	assert.GreaterOrEqual(t, doubleAttr(attrs, names.share), share, "%s: %s label's share", id, phase)
}

// tickMetrics are the recorded series the sampling clock reads every tick,
// by how a coarser tick would have read them.
var tickMetrics = map[string]tickRead{
	"nvidia.gpu.sm.activity": tickMean, "nvidia.gpu.tensor.activity": tickMean, "nvidia.gpu.dram.activity": tickMean,
	"nvidia.gpu.pcie.throughput": tickMean, "hw.power": tickInstant, "nvidia.gpu.throttle.time": tickInstant,
}

type tickRead int

const (
	tickMean    tickRead = iota // GPM: counters' increase over the tick, so the mean of the finer ticks it spans
	tickInstant                 // read at the tick: instant power, cumulative throttle times
)

// tickSlack is how far from the energy counter's timestamp a reading of
// the same tick may lie.
const tickSlack = 50 * time.Millisecond

// retick returns run as a sampling clock ticking at the flush ticks only
// (the energy counter's reads, 1 s apart) would have recorded it. A
// recorded point holds since the series' previous one (the receiver keeps
// only the ends of a run of equal values), so a GPM reading over (T − 1 s,
// T] is the mean of that step function, and an instant one the value of the
// last point at or before T (T: the tick's own reading of the series).
// Every other series is kept as it was.
func retick(t *testing.T, run hardwareRun) hardwareRun {
	t.Helper()
	type series struct {
		read   tickRead
		points []recordedPoint
	}
	var grid []int64
	bySeries := map[string]*series{}
	var keys []string
	out := run
	out.Points = nil
	for _, p := range run.Points {
		if p.Metric == "hw.energy" {
			grid = append(grid, p.Time)
		}
		read, ok := tickMetrics[p.Metric]
		if !ok {
			out.Points = append(out.Points, p)
			continue
		}
		k := p.Metric + fmt.Sprint(p.Attrs)
		if bySeries[k] == nil {
			bySeries[k] = &series{read: read}
			keys = append(keys, k)
		}
		bySeries[k].points = append(bySeries[k].points, p)
	}
	slices.Sort(grid)
	require.NotEmpty(t, grid)
	for _, k := range keys {
		s := bySeries[k]
		slices.SortFunc(s.points, func(a, b recordedPoint) int { return cmp.Compare(a.Time, b.Time) })
		for _, flush := range grid {
			// A tick's readings carry the driver's own timestamps, a few ms
			// either side of the energy counter's; a series holding its
			// value has no point there, and holds it at the flush.
			i, _ := slices.BinarySearchFunc(s.points, flush+int64(tickSlack), func(p recordedPoint, t int64) int { return cmp.Compare(p.Time, t) })
			if i == 0 {
				continue // nothing read by then
			}
			p := s.points[i-1]
			if p.Time < flush-int64(tickSlack) {
				p.Time = flush
			}
			if s.read == tickMean {
				// A point holds since the series' previous one.
				at, from := p.Time, p.Time-int64(time.Second)
				var sum, covered float64
				for j := 1; j < len(s.points) && s.points[j-1].Time < at; j++ {
					lo, hi := max(s.points[j-1].Time, from), min(s.points[j].Time, at)
					if hi > lo {
						sum += s.points[j].Value * float64(hi-lo)
						covered += float64(hi - lo)
					}
				}
				if covered == 0 {
					continue
				}
				p.Value = sum / covered
			}
			out.Points = append(out.Points, p)
		}
	}
	return out
}

// gpmMetrics are the recorded series GPM reads (nvmlGpmMetricsGet between
// two of the tick's samples).
var gpmMetrics = map[string]bool{
	"nvidia.gpu.sm.activity": true, "nvidia.gpu.sm.occupancy": true, "nvidia.gpu.tensor.activity": true,
	"nvidia.gpu.dram.activity": true, "nvidia.gpu.pipe.activity": true, "nvidia.gpu.pcie.throughput": true,
}

// measuredGPMLag measures how late the run's GPM readings describe the GPU: at
// each synthetic request's prefill-to-decode edge (the workload
// synchronises the GPU there, so the span's timestamp is the GPU's), the
// tensor activity the readings stamped after the edge still show, in
// seconds of the prefill's level, less what the first of them covers
// before the edge. The median over the requests.
func measuredGPMLag(t *testing.T, run hardwareRun) time.Duration {
	t.Helper()
	var tensor []recordedPoint
	for _, p := range run.Points {
		if p.Metric == "nvidia.gpu.tensor.activity" {
			tensor = append(tensor, p)
		}
	}
	slices.SortFunc(tensor, func(a, b recordedPoint) int { return cmp.Compare(a.Time, b.Time) })
	var lags []float64
	for _, q := range run.Requests {
		if q.Kind != gpucheck.KindSynthetic {
			continue
		}
		var prefill float64
		for _, s := range run.Spans {
			if s.SpanID == q.SpanID {
				prefill, _ = s.Attrs["gen_ai.latency.time_in_model_prefill"].(float64)
			}
		}
		edge := q.PrefillStart + int64(prefill*1e9)
		var level float64
		for _, p := range tensor {
			if p.Time > q.PrefillStart+int64(500*time.Millisecond) && p.Time < edge-int64(300*time.Millisecond) {
				level = max(level, p.Value)
			}
		}
		i, _ := slices.BinarySearchFunc(tensor, edge+1, func(p recordedPoint, t int64) int { return cmp.Compare(p.Time, t) })
		require.True(t, level > 0 && i > 0 && i < len(tensor), "%s: GPM readings around its prefill", q.ID)
		var seen float64
		for j := i; j < min(i+4, len(tensor)); j++ {
			seen += tensor[j].Value / level * float64(tensor[j].Time-tensor[j-1].Time)
		}
		lags = append(lags, seen-float64(edge-tensor[i-1].Time))
	}
	require.NotEmpty(t, lags)
	slices.Sort(lags)
	return time.Duration(lags[len(lags)/2])
}

// alignGPM stamps the run's GPM readings lag earlier.
func alignGPM(run hardwareRun, lag time.Duration) hardwareRun {
	out := run
	out.Points = slices.Clone(run.Points)
	for i := range out.Points {
		if gpmMetrics[out.Points[i].Metric] {
			out.Points[i].Time -= int64(lag)
		}
	}
	return out
}

// TestHardwareRunPrefillLag: on the H200, the spans' clock reads each
// run's GPM lag through the processor's own path (spans and readings
// replayed in time order, prefillLag's sums): the correlation peaks
// clearly (well past prefillMinCorrelation and prefillContrast) above what
// the synthetic requests' edges measure (measuredGPMLag), by less than
// 20 ms: the side a lag costs more on, but within the flat top of
// TestHardwareRunGPMLagErrsLow. A window that opens before the host has
// prepared the step puts its tokens early. A run gives about a hundred
// readings, short of prefillMinReadings, so the replays themselves do not
// take it.
func TestHardwareRunPrefillLag(t *testing.T) {
	for _, name := range []string{"pertick", "perflush", "samples"} {
		t.Run(name, func(t *testing.T) {
			run := loadHardwareRun(t, name)
			sentTokens(&run)
			measured := measuredGPMLag(t, run)
			_, c := replayHardwareRun(t, run, nil)
			require.Len(t, c.ingest.gpus, 1)
			for _, g := range c.ingest.gpus {
				l := g.gpm.prefills.cur.add(&g.gpm.prefills.prev)
				lag, bestR, worstR, ok := l.peak()
				require.True(t, ok)
				t.Logf("the spans read %v over %v readings (correlation %.3f, weakest %.3f); the edges measure %v", lag, l.n, bestR, worstR, measured.Round(time.Millisecond))
				assert.GreaterOrEqual(t, bestR, prefillMinCorrelation)
				assert.GreaterOrEqual(t, bestR-worstR, prefillContrast)
				assert.GreaterOrEqual(t, lag, measured, "the spans read high")
				assert.Less(t, lag, measured+20*time.Millisecond, "by less than 20 ms")
				assert.False(t, g.gpm.prefills.ok, "a run's readings are too few to take it")
			}
		})
	}
}

// TestHardwareRunGPMLag: on the H200, GPM readings describe the GPU
// 58-115 ms before their timestamps (the tick that reads them), measured
// per run at the synthetic requests' synchronised edges (measuredGPMLag). That lag
// is what left the synthetic requests after the first a few percent low:
// the first decode bins still show the prefill's tensor work, which the
// books take for requests not yet seen. Stamped back by the run's own lag,
// the bias goes. The processor learns the lag itself where the GPU sends
// the driver's power samples (run 3; history.align_gpm): within 25 ms of
// the edges' measure, and the bias goes as it does with the measured lag.
// The first two runs, without samples, are aligned by the measured lag.
func TestHardwareRunGPMLag(t *testing.T) {
	for _, name := range []string{"pertick", "perflush", "samples"} {
		t.Run(name, func(t *testing.T) {
			run := loadHardwareRun(t, name)
			sentTokens(&run)
			lag := measuredGPMLag(t, run)
			t.Logf("GPM readings %v late", lag)
			assert.Greater(t, lag, 30*time.Millisecond, "GPM readings lag the tick")
			samples := run.ReferenceSource == driverPowerSamples
			// As read, then aligned: by the processor where it can learn
			// the lag, by the measured lag where it cannot.
			asRead, aligned := run, alignGPM(run, lag)
			off := func(cfg *Config) { cfg.History.AlignGPM = false }
			var asReadMod, alignedMod func(*Config)
			if samples {
				asReadMod, aligned = off, run
			} else {
				alignedMod = off
			}
			var bias [2]float64 // mean signed error of the synthetic requests after the first
			for v, r := range []struct {
				run hardwareRun
				mod func(*Config)
			}{{asRead, asReadMod}, {aligned, alignedMod}} {
				got, c := replayHardwareRun(t, r.run, r.mod)
				if samples && v == 1 {
					require.Len(t, c.ingest.gpus, 1)
					for _, g := range c.ingest.gpus {
						t.Logf("the processor learned %v from %d edges", g.gpm.lag, g.gpm.n)
						assert.InDelta(t, float64(lag), float64(g.gpm.lag), float64(25*time.Millisecond), "the lag learned from the power edges")
					}
				}
				bias[v] = syntheticBias(t, run, got, func(id string, e, ref float64) {
					t.Logf("%-14s %8.1f J vs %8.1f J (%+.1f%%), %s", id, e, ref, 100*(e/ref-1), [2]string{"as read", "aligned"}[v])
					if v == 1 {
						assert.InEpsilon(t, ref, e, gpucheck.MaxEnergyError, id)
					}
				})
			}
			t.Logf("bias %+.2f%% as read, %+.2f%% aligned", 100*bias[0], 100*bias[1])
			assert.Less(t, math.Abs(bias[1]), math.Abs(bias[0]), "aligning GPM takes the bias away")
		})
	}
}

// syntheticBias is the mean signed energy error of the run's synthetic
// requests after the first (whose GPM no learned lag aligns yet), each
// request's given to each (ID, energy, reference) first.
func syntheticBias(t *testing.T, run hardwareRun, got map[string]pcommon.Map, each func(id string, e, ref float64)) float64 {
	t.Helper()
	var sum float64
	var n int
	for _, q := range run.Requests {
		if q.Kind != gpucheck.KindSynthetic || q.ID == "synthetic-0" {
			continue
		}
		ref := referenceEnergy(t, run, q)
		e := doubleAttr(got[q.SpanID], "gpuviz.energy")
		each(q.ID, e, ref)
		sum += e/ref - 1
		n++
	}
	require.NotZero(t, n)
	return sum / float64(n)
}

// TestHardwareRunGPMLagErrsLow: GPM stamped back further than its lag puts
// a prefill's tensor work before its span starts, where the books keep it
// for requests not yet seen. On run 3 (whose spans' edges measure 105 ms) a
// lag 50 ms too long costs the synthetic requests more than no alignment
// at all, and the measured lag least: a lag learner must err low
// (docs/hardware.md, "A lag fitted from every reading", whose table this
// logs).
func TestHardwareRunGPMLagErrsLow(t *testing.T) {
	run := loadHardwareRun(t, "samples")
	sentTokens(&run)
	measured := measuredGPMLag(t, run)
	off := func(cfg *Config) { cfg.History.AlignGPM = false }
	bias := map[time.Duration]float64{}
	for _, lag := range []time.Duration{0, 60 * time.Millisecond, 90 * time.Millisecond, measured,
		115 * time.Millisecond, 130 * time.Millisecond, measured + 50*time.Millisecond} {
		got, _ := replayHardwareRun(t, alignGPM(run, lag), off)
		var errs []string
		bias[lag] = syntheticBias(t, run, got, func(_ string, e, ref float64) {
			errs = append(errs, fmt.Sprintf("%+.1f%%", 100*(e/ref-1)))
		})
		t.Logf("GPM stamped back %v: %s", lag.Round(time.Millisecond), strings.Join(errs, " / "))
	}
	tooFar, none, right := math.Abs(bias[measured+50*time.Millisecond]), math.Abs(bias[0]), math.Abs(bias[measured])
	assert.Greater(t, tooFar, none, "50 ms too far costs more than no alignment")
	assert.Greater(t, none, right, "the measured lag costs least")
}
