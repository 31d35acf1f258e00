package gpucheck

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Everything below is SYNTHETIC too: request runs, spans and GPM ticks made
// up in the test, shaped like what scripts/gpu-requests.py reports and what
// the collector exports at a 250 ms sampling clock. None of it was recorded
// on hardware.

const (
	tick       = 250 * time.Millisecond
	queueLen   = 500 * time.Millisecond
	prefillLen = 2 * time.Second
	decodeLen  = 4 * time.Second
	reqGap     = time.Second
)

func ptr(f float64) *float64 { return &f }

// synthRun is four synthetic requests back to back from t0 (queue, prefill,
// decode, a gap) and one batch of two generate requests after them, each
// with a reference energy of 1000 J (the batch's window 2000 J).
func synthRun() RequestRun {
	run := RequestRun{GPUUUID: synthGPU, Power: &PowerReference{Source: "field 186", Samples: 1000, MedianS: 0.012, MaxS: 0.030}}
	t := t0
	for i := 0; i < 4; i++ {
		q := Request{ID: "synthetic-" + string(rune('0'+i)), Kind: KindSynthetic, Batch: 1,
			TraceID: strings.Repeat("a", 31) + string(rune('0'+i)), SpanID: strings.Repeat("b", 15) + string(rune('0'+i)),
			Start: t, PromptTokens: 1, OutputTokens: 1, ReferenceEnergyJ: ptr(1000)}
		q.PrefillStart = t + int64(queueLen)
		q.FirstToken = q.PrefillStart + int64(prefillLen)
		q.End = q.FirstToken + int64(decodeLen)
		run.Requests = append(run.Requests, q)
		t = q.End + int64(reqGap)
	}
	for i := 0; i < 2; i++ {
		run.Requests = append(run.Requests, Request{ID: "generate-0-" + string(rune('0'+i)), Kind: KindGenerate, Batch: 2,
			TraceID: strings.Repeat("c", 31) + string(rune('0'+i)), SpanID: strings.Repeat("d", 15) + string(rune('0'+i)),
			Start: t, PrefillStart: t, FirstToken: t + int64(50*time.Millisecond), End: t + int64(5*time.Second),
			PromptTokens: 512, OutputTokens: 1000, ReferenceEnergyJ: ptr(1000), ReferenceWindowEnergyJ: ptr(2000)})
	}
	return run
}

// enrichedSpan is the span the processor would export for q, with the
// labels and energy given.
func enrichedSpan(q Request, prefill, decode string, energy float64) Span {
	return Span{Name: SpanNameVLLM, TraceID: q.TraceID, SpanID: q.SpanID, StartUnixNano: q.Start, EndUnixNano: q.End,
		Attrs: map[string]any{
			AttrFamily: FamilyVLLM, AttrMatch: "attribute", AttrCoverage: 1.0,
			AttrEnergy: energy, AttrEnergySource: "counter",
			PhaseLabelAttr(SpanPhasePrefill): prefill, PhaseLabelAttr(SpanPhaseDecode): decode,
			"hw.id": synthGPU,
		}}
}

func goodSpans(run RequestRun) []Span {
	var spans []Span
	for _, q := range run.Requests {
		spans = append(spans, enrichedSpan(q, LabelCompute, LabelMemory, 1010))
	}
	return spans
}

// ticks makes GPM points every tick from t0 to the end of the run, valued
// by at(t) where t is the end of the tick's stretch.
func ticks(run RequestRun, metric string, step time.Duration, at func(t int64) float64) []Point {
	end := run.Requests[len(run.Requests)-1].End + int64(time.Second)
	var points []Point
	for t := t0; t <= end; t += int64(step) {
		points = append(points, Point{Metric: metric, Attrs: map[string]string{"hw.id": synthGPU, "hw.name": "GPU 0"},
			TimeUnixNano: t, Value: at(t)})
	}
	return points
}

// phaseOf says which synthetic phase the stretch ending at t lies in.
func phaseOf(run RequestRun, t int64) string {
	for _, q := range run.Requests {
		if q.Kind != KindSynthetic {
			continue
		}
		switch {
		case t > q.PrefillStart && t <= q.FirstToken:
			return SpanPhasePrefill
		case t > q.FirstToken && t <= q.End:
			return SpanPhaseDecode
		}
	}
	return "idle"
}

// gpmTicks are tensor and DRAM ticks of a GPU that shows each phase's
// signature: tensor 0.8 in prefill, DRAM 0.85 in decode.
func gpmTicks(run RequestRun, step time.Duration) []Point {
	level := map[string][2]float64{SpanPhasePrefill: {0.8, 0.3}, SpanPhaseDecode: {0.02, 0.85}, "idle": {0, 0}}
	return append(
		ticks(run, metricTensor, step, func(t int64) float64 { return level[phaseOf(run, t)][0] }),
		ticks(run, metricDRAM, step, func(t int64) float64 { return level[phaseOf(run, t)][1] })...)
}

// throttleTicks are throttle-share ticks of reason: share in the
// synthetic prefills that end before until, 0 elsewhere.
func throttleTicks(run RequestRun, reason string, share float64, until int64) []Point {
	points := ticks(run, metricThrottle, tick, func(t int64) float64 {
		if phaseOf(run, t) == SpanPhasePrefill && t < until {
			return share
		}
		return 0
	})
	for i := range points {
		points[i].Attrs = map[string]string{"hw.id": synthGPU, attrReason: reason}
	}
	return points
}

// rowsOfRequest lists a request's rows as "STATUS check".
func rowsOfRequest(t *testing.T, rep JoinReport, id string) []string {
	t.Helper()
	for _, q := range rep.Requests {
		if q.ID == id {
			var rows []string
			for _, r := range q.Rows {
				rows = append(rows, string(r.Status)+" "+r.Check)
			}
			return rows
		}
	}
	t.Fatalf("no request %s in the report", id)
	return nil
}

func tickRowsOf(rep JoinReport) []string {
	var rows []string
	for _, r := range rep.Ticks {
		rows = append(rows, string(r.Status)+" "+r.Check)
	}
	return rows
}

var (
	goodSynthetic = []string{
		"PASS span enriched (gpuviz.request.family=vllm)",
		"PASS prefill label = compute_bound",
		"PASS decode label = memory_bound",
		"PASS energy within 5% of reference",
	}
	goodGenerate = []string{
		"PASS span enriched (gpuviz.request.family=vllm)",
		"info prefill label",
		"info decode label",
		"info energy (a share of its batch's)",
	}
	// The batch's last request checks the batch's total.
	goodLastGenerate = append(goodGenerate[:4:4], "PASS batch of 2: energy within 5% of reference")
	goodTicks        = []string{
		"PASS tensor ticks in prefill >= 2.0/s",
		"PASS tensor prefill - decode >= 0.25",
		"PASS dram decode - prefill >= 0.25",
	}
)

func TestAnalyzeJoin(t *testing.T) {
	tests := []struct {
		name       string
		run        func() RequestRun
		spans      func(RequestRun) []Span
		points     func(RequestRun) []Point
		failed     int
		incomplete bool
		rows       map[string][]string // request → rows, when checked
		ticks      []string
	}{{
		name:   "every expectation holds",
		run:    synthRun,
		spans:  goodSpans,
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		rows:   map[string][]string{"synthetic-0": goodSynthetic, "synthetic-3": goodSynthetic, "generate-0-0": goodGenerate, "generate-0-1": goodLastGenerate},
		ticks:  goodTicks,
	}, {
		name: "a prefill labelled power_throttled and a decode labelled compute_bound fail",
		run:  synthRun,
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			spans[1] = enrichedSpan(r.Requests[1], "power_throttled", LabelCompute, 1000)
			return spans
		},
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		failed: 2,
		rows: map[string][]string{"synthetic-1": {
			"PASS span enriched (gpuviz.request.family=vllm)",
			"FAIL prefill label = compute_bound",
			"FAIL decode label = memory_bound",
			"PASS energy within 5% of reference",
		}, "synthetic-0": goodSynthetic},
		ticks: goodTicks,
	}, {
		name: "a GPU at its power cap in the prefills: power_throttled is right, compute_bound fails",
		run:  synthRun,
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			for i := range 3 {
				spans[i] = enrichedSpan(r.Requests[i], LabelPower, LabelMemory, 1010)
			}
			return spans
		},
		points: func(r RequestRun) []Point {
			// Capped in the first three requests' prefills only; another
			// reason throttling throughout decides nothing.
			capped := throttleTicks(r, reasonPowerCap, 1, r.Requests[3].Start)
			other := throttleTicks(r, "sync_boost", 1, math.MaxInt64)
			for i := range other {
				other[i].Value = 1
			}
			return append(append(gpmTicks(r, tick), capped...), other...)
		},
		failed: 0,
		rows: map[string][]string{
			"synthetic-0": {
				"PASS span enriched (gpuviz.request.family=vllm)",
				"PASS prefill label = power_throttled (power cap 100% of it)",
				"PASS decode label = memory_bound",
				"PASS energy within 5% of reference",
			},
			"synthetic-3": goodSynthetic,
		},
		ticks: goodTicks,
	}, {
		name:  "a GPU at its power cap in a prefill labelled compute_bound fails",
		run:   synthRun,
		spans: goodSpans,
		points: func(r RequestRun) []Point {
			return append(gpmTicks(r, tick), throttleTicks(r, reasonPowerCap, 0.8, r.Requests[1].Start)...)
		},
		failed: 1,
		rows: map[string][]string{
			"synthetic-0": append([]string{goodSynthetic[0], "FAIL prefill label = power_throttled (power cap 80% of it)"}, goodSynthetic[2:]...),
			"synthetic-1": goodSynthetic,
		},
		ticks: goodTicks,
	}, {
		name: "the generate requests' labels are reported, never failed",
		run:  synthRun,
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			spans[4] = enrichedSpan(r.Requests[4], "unknown", "host_bound", 1000)
			return spans
		},
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		rows:   map[string][]string{"generate-0-0": goodGenerate},
		ticks:  goodTicks,
	}, {
		name: "energy 6% off fails, 4.9% off passes, both ways",
		run:  synthRun,
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			spans[0] = enrichedSpan(r.Requests[0], LabelCompute, LabelMemory, 1060)
			spans[1] = enrichedSpan(r.Requests[1], LabelCompute, LabelMemory, 951)
			spans[2] = enrichedSpan(r.Requests[2], LabelCompute, LabelMemory, 940)
			// A batch's energy given wholly to one sequence: 1.5x the batch's.
			spans[5] = enrichedSpan(r.Requests[5], LabelCompute, LabelMemory, 2000)
			return spans
		},
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		failed: 3,
		rows: map[string][]string{
			"synthetic-0":  append(goodSynthetic[:3:3], "FAIL energy within 5% of reference"),
			"synthetic-1":  goodSynthetic,
			"synthetic-2":  append(goodSynthetic[:3:3], "FAIL energy within 5% of reference"),
			"generate-0-1": append(goodGenerate[:4:4], "FAIL batch of 2: energy within 5% of reference"),
		},
		ticks: goodTicks,
	}, {
		name: "a batch split unevenly passes while its total holds",
		run:  synthRun,
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			spans[4] = enrichedSpan(r.Requests[4], LabelCompute, LabelMemory, 1500)
			spans[5] = enrichedSpan(r.Requests[5], LabelCompute, LabelMemory, 520)
			return spans
		},
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		rows:   map[string][]string{"generate-0-0": goodGenerate, "generate-0-1": goodLastGenerate},
		ticks:  goodTicks,
	}, {
		name:   "a batch with a span missing fails its total",
		run:    synthRun,
		spans:  func(r RequestRun) []Span { return goodSpans(r)[:5] },
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		failed: 2,
		rows: map[string][]string{"generate-0-1": {
			"FAIL span enriched (gpuviz.request.family=vllm)", "FAIL batch of 2: energy within 5% of reference"}},
		ticks: goodTicks,
	}, {
		name: "a span without energy fails; without a reference the row is n/a and the run incomplete",
		run: func() RequestRun {
			r := synthRun()
			r.Requests[1].ReferenceEnergyJ = nil
			r.Skipped = []Skip{{Part: "reference_energy", Reason: "pynvml is not installed"}}
			return r
		},
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			delete(spans[0].Attrs, AttrEnergy)
			return spans
		},
		points:     func(r RequestRun) []Point { return gpmTicks(r, tick) },
		failed:     1,
		incomplete: true,
		rows: map[string][]string{
			"synthetic-0": append(goodSynthetic[:3:3], "FAIL energy within 5% of reference"),
			"synthetic-1": append(goodSynthetic[:3:3], "n/a energy within 5% of reference"),
		},
		ticks: goodTicks,
	}, {
		name: "a missing span and a span left un-enriched fail",
		run:  synthRun,
		spans: func(r RequestRun) []Span {
			spans := goodSpans(r)
			delete(spans[3].Attrs, AttrFamily)
			return spans[1:]
		},
		points: func(r RequestRun) []Point { return gpmTicks(r, tick) },
		failed: 2,
		rows: map[string][]string{
			"synthetic-0": {"FAIL span enriched (gpuviz.request.family=vllm)"},
			"synthetic-3": {"FAIL span enriched (gpuviz.request.family=vllm)"},
			"synthetic-1": goodSynthetic,
		},
		ticks: goodTicks,
	}, {
		name:   "GPM only once a second: too few ticks, and each mixes the phases",
		run:    synthRun,
		spans:  goodSpans,
		points: func(r RequestRun) []Point { return gpmTicks(r, time.Second) },
		failed: 1,
		ticks: []string{
			"FAIL tensor ticks in prefill >= 2.0/s",
			"PASS tensor prefill - decode >= 0.25",
			"PASS dram decode - prefill >= 0.25",
		},
	}, {
		name:  "ticks stamped 4 s late: the activities do not separate the phases",
		run:   synthRun,
		spans: goodSpans,
		points: func(r RequestRun) []Point {
			// Stamped a decode's length late: the prefill windows see the
			// previous request's decode, the decode windows the gap and the
			// prefill before them.
			points := gpmTicks(r, tick)
			for i := range points {
				points[i].TimeUnixNano += int64(decodeLen)
			}
			return points
		},
		failed: 2,
		ticks: []string{
			"PASS tensor ticks in prefill >= 2.0/s",
			"FAIL tensor prefill - decode >= 0.25",
			"FAIL dram decode - prefill >= 0.25",
		},
	}, {
		name:   "without GPM the tick rows are n/a: incomplete, not failed",
		run:    synthRun,
		spans:  goodSpans,
		points: func(RequestRun) []Point { return nil },
		// no hw.id at all in the capture: nothing to select, no note
		incomplete: true,
		ticks: []string{
			"n/a tensor ticks in prefill >= 2.0/s",
			"n/a tensor prefill - decode >= 0.25",
			"n/a dram decode - prefill >= 0.25",
		},
	}, {
		name: "no synthetic request fails",
		run: func() RequestRun {
			r := synthRun()
			r.Requests = r.Requests[4:]
			return r
		},
		spans:  goodSpans,
		points: func(r RequestRun) []Point { return nil },
		failed: 1,
		ticks:  []string{"FAIL synthetic requests ran"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := tt.run()
			rep := AnalyzeJoin(tt.spans(run), tt.points(run), run)
			assert.Equal(t, tt.failed, rep.Failed(), rep.Table())
			assert.Equal(t, tt.incomplete, rep.Incomplete(), rep.Table())
			for id, want := range tt.rows {
				assert.Equal(t, want, rowsOfRequest(t, rep, id), "request %s\n%s", id, rep.Table())
			}
			assert.Equal(t, tt.ticks, tickRowsOf(rep), rep.Table())
		})
	}
}

func TestTickStats(t *testing.T) {
	// Points every 250 ms from t0; the window [t0+1 s, t0+2 s] holds the
	// stretches ending at +1.25, +1.5, +1.75, +2 s wholly: the point at +1 s
	// describes (+0.75 s, +1 s] and is out.
	var points []Point
	for i := 0; i <= 12; i++ {
		points = append(points, Point{Metric: metricTensor, Attrs: map[string]string{"hw.id": synthGPU},
			TimeUnixNano: t0 + int64(i)*int64(tick), Value: float64(i)})
	}
	mean, n := tickStats(points, metricTensor, []window{{t0 + int64(time.Second), t0 + int64(2*time.Second)}})
	assert.Equal(t, 4, n)
	assert.InDelta(t, (5.0+6+7+8)/4, mean, 1e-12)

	// Out of order in the capture (exports interleave): sorted first.
	rev := append([]Point(nil), points...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	mean2, n2 := tickStats(rev, metricTensor, []window{{t0 + int64(time.Second), t0 + int64(2*time.Second)}})
	assert.Equal(t, n, n2)
	assert.Equal(t, mean, mean2)

	_, n = tickStats(points, metricDRAM, []window{{t0, t0 + int64(3*time.Second)}})
	assert.Zero(t, n, "other metrics are not counted")
}

func TestJoinTable(t *testing.T) {
	run := synthRun()
	spans := goodSpans(run)
	spans[0] = enrichedSpan(run.Requests[0], LabelCompute, LabelMemory, 1100)
	table := AnalyzeJoin(spans, gpmTicks(run, tick), run).Table()
	for _, want := range []string{
		"gpu-check join: " + synthGPU,
		"note: reference power: field 186, 1000 samples, median period 12.0 ms, longest gap 30.0 ms",
		"REQUEST        RESULT EXPECTATION                            VALUE",
		"synthetic-0    PASS   span enriched (gpuviz.request.family=vllm) match attribute, coverage 1.00",
		"               FAIL   energy within 5% of reference          1100.0 J vs 1000.0 J (+10.0%, counter)",
		"generate-0-0   PASS",
		"               info   prefill label                          compute_bound",
		"ticks          PASS   tensor ticks in prefill >= 2.0/s       4.0/s (32 ticks in 8.0 s)",
	} {
		assert.Contains(t, table, want)
	}
	assert.True(t, strings.HasSuffix(table, "\nJOIN: FAIL (1 failed)\n"), table)

	table = AnalyzeJoin(goodSpans(run), gpmTicks(run, tick), run).Table()
	assert.True(t, strings.HasSuffix(table, "\nJOIN: PASS\n"), table)
	table = AnalyzeJoin(goodSpans(run)[:5], gpmTicks(run, tick), run).Table()
	assert.Contains(t, table, "FAIL   batch of 2: energy within 5% of reference 1 of its 2 spans carry gpuviz.energy")
	run.Skipped = []Skip{{Part: "hf_generate", Reason: "transformers is not installed"}}
	table = AnalyzeJoin(goodSpans(run), gpmTicks(run, tick), run).Table()
	assert.Contains(t, table, "skipped: hf_generate: transformers is not installed")
	assert.True(t, strings.HasSuffix(table, "\nJOIN: INCOMPLETE (some parts could not run; see skipped and n/a)\n"), table)
}

func TestRequestRunAddLine(t *testing.T) {
	var run RequestRun
	for _, line := range []string{
		`{"gpu_uuid": "GPU-synthetic-0"}`,
		``,
		`{"skipped": {"part": "hf_generate", "reason": "transformers is not installed"}}`,
		`{"power_reference": {"source": "field 186", "samples": 10, "median_period_s": 0.01, "max_period_s": 0.02}}`,
		`{"request": {"id": "s0", "kind": "synthetic", "trace_id": "ab", "span_id": "cd", "start_unix_nano": 10,
		  "prefill_start_unix_nano": 10, "first_token_unix_nano": 20, "end_unix_nano": 30, "batch": 1,
		  "reference_energy_j": 12.5}}`,
		`{"request": {"id": "s1", "kind": "synthetic", "trace_id": "ab", "span_id": "ce", "start_unix_nano": 10,
		  "prefill_start_unix_nano": 11, "first_token_unix_nano": 20, "end_unix_nano": 30, "reference_energy_j": null}}`,
	} {
		require.NoError(t, run.AddLine(strings.ReplaceAll(line, "\n", "")), line)
	}
	assert.Equal(t, "GPU-synthetic-0", run.GPUUUID)
	assert.Equal(t, []Skip{{Part: "hf_generate", Reason: "transformers is not installed"}}, run.Skipped)
	require.NotNil(t, run.Power)
	assert.Equal(t, 10, run.Power.Samples)
	require.Len(t, run.Requests, 2)
	assert.Equal(t, 12.5, *run.Requests[0].ReferenceEnergyJ)
	assert.Nil(t, run.Requests[1].ReferenceEnergyJ)

	for _, bad := range []string{
		`not json`,
		`{"phase": "idle"}`,
		`{"request": {"id": "x", "trace_id": "ab", "span_id": "cd", "start_unix_nano": 10, "prefill_start_unix_nano": 10, "first_token_unix_nano": 10, "end_unix_nano": 30}}`,
		`{"request": {"id": "x", "trace_id": "ab", "span_id": "cd", "start_unix_nano": 10, "prefill_start_unix_nano": 5, "first_token_unix_nano": 20, "end_unix_nano": 30}}`,
		`{"request": {"id": "x", "trace_id": "", "span_id": "cd", "start_unix_nano": 10, "prefill_start_unix_nano": 10, "first_token_unix_nano": 20, "end_unix_nano": 30}}`,
	} {
		assert.Error(t, run.AddLine(bad), bad)
	}
	assert.Len(t, run.Requests, 2)
}

func TestFromTracesAndSpanAccessors(t *testing.T) {
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(SpanNameVLLM)
	sp.SetTraceID(pcommon.TraceID{0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	sp.SetSpanID(pcommon.SpanID{0xcd, 1, 2, 3, 4, 5, 6, 7})
	sp.SetStartTimestamp(pcommon.Timestamp(t0))
	sp.SetEndTimestamp(pcommon.Timestamp(t0 + 5))
	sp.Attributes().PutDouble(AttrEnergy, 12.5)
	sp.Attributes().PutInt("gen_ai.usage.prompt_tokens", 7)
	sp.Attributes().PutStr(AttrFamily, FamilyVLLM)
	sp.Attributes().PutEmptySlice("gpuviz.gpu.ids").AppendEmpty().SetStr(synthGPU)
	child := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().AppendEmpty()
	child.SetName("gpu.prefill")
	child.SetParentSpanID(sp.SpanID())

	spans := FromTraces(td)
	require.Len(t, spans, 2)
	s := spans[0]
	assert.Equal(t, "ab0102030405060708090a0b0c0d0e0f", s.TraceID)
	assert.Equal(t, "cd01020304050607", s.SpanID)
	assert.Empty(t, s.ParentSpanID)
	assert.Equal(t, t0, s.StartUnixNano)
	assert.Equal(t, FamilyVLLM, s.Str(AttrFamily))
	e, ok := s.Float(AttrEnergy)
	assert.True(t, ok)
	assert.Equal(t, 12.5, e)
	n, ok := s.Float("gen_ai.usage.prompt_tokens")
	assert.True(t, ok, "ints read as numbers")
	assert.Equal(t, 7.0, n)
	_, ok = s.Float(AttrFamily)
	assert.False(t, ok, "a string is not a number")
	assert.Equal(t, "", s.Str(AttrEnergy), "a number is not a string")
	assert.Equal(t, "cd01020304050607", spans[1].ParentSpanID)

	// A saved capture read back: numbers are float64, and still read.
	data, err := json.Marshal(spans)
	require.NoError(t, err)
	var back []Span
	require.NoError(t, json.Unmarshal(data, &back))
	e, ok = back[0].Float(AttrEnergy)
	assert.True(t, ok)
	assert.Equal(t, 12.5, e)
	assert.Equal(t, []any{synthGPU}, back[0].Attrs["gpuviz.gpu.ids"])
}

func TestHandlerTraces(t *testing.T) {
	capture := &Capture{}
	srv := httptest.NewServer(capture.Handler())
	defer srv.Close()

	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(SpanNameVLLM)
	sp.Attributes().PutStr(AttrFamily, FamilyVLLM)
	body, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	require.NoError(t, err)

	post := func(body []byte) int {
		resp, err := srv.Client().Post(srv.URL+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, post(body))
	assert.Equal(t, http.StatusBadRequest, post([]byte{0xff, 0xff, 0xff}))
	spans := capture.Spans()
	require.Len(t, spans, 1)
	assert.Equal(t, FamilyVLLM, spans[0].Str(AttrFamily))
	assert.Empty(t, capture.Points(), "spans are not points")
}
