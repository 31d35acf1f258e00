package view // import "github.com/gpuviz/gpuviz/internal/view"

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// API bounds (docs/view.md).
const (
	MinRange        = 60 * time.Second
	DefaultRange    = 300 * time.Second
	MinColumns      = 10
	MaxColumns      = 4000
	DefaultColumns  = 600
	MaxRequestsSent = 5000
)

// Query is one /api/v1/view request, validated.
type Query struct {
	Range         time.Duration
	Columns       int
	Since         int64 // Unix ms; only with HasSince
	HasSince      bool
	RequestsAfter uint64 // only with HasAfter
	HasAfter      bool
}

// Anomaly rules over the last minute (docs/view.md).
const (
	anomalyWindow      = 60 // seconds
	anomalyPowerShare  = 0.2
	anomalyThermal     = 0.05
	anomalyMemoryShare = 0.97
	anomalyTemperature = 85.0
	anomalyStale       = 30 // seconds without a sample
	// throttledAtAll is where a throttled share's anomaly starts: any
	// share above 0.
	throttledAtAll = math.SmallestNonzeroFloat64
)

// acc aggregates one signal over one column.
type acc struct {
	min, max float32
	sum      float64
	n        uint64
}

// gpuInfo is a GPU's identity, copied under its lock.
type gpuInfo struct {
	g                    *GPU
	index                int
	name                 string
	simulated            bool
	memTotal, powerLimit float64
	has                  [NumSignals]bool
	newestSec            int64
	labelTo              int64
	finalTo              int64
}

func (g *GPU) info() gpuInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return gpuInfo{g: g, index: g.index, name: g.name, simulated: g.simulated, memTotal: g.memTotal,
		powerLimit: g.powerLimit, has: g.has, newestSec: g.newestSec, labelTo: g.labelTo, finalTo: g.finalTo}
}

// AppendView appends the JSON answer to q at now to dst.
func (s *Source) AppendView(dst []byte, q Query, now time.Time, traceURL string) []byte {
	nowMS := now.UnixMilli()
	rangeMS := q.Range.Milliseconds()
	step := max(1000, (rangeMS+int64(q.Columns)-1)/int64(q.Columns))
	step = (step + 999) / 1000 * 1000
	first := floorDiv(nowMS-rangeMS, step) * step
	last := floorDiv(nowMS, step) * step
	from := first
	if q.HasSince {
		since := min(max(q.Since, first), last) // before rounding: a since near MaxInt64 would wrap
		from = min((since+step-1)/step*step, last)
	}
	ncols := int((last-from)/step) + 1

	gpus := s.snapshot()
	infos := make([]gpuInfo, len(gpus))
	for i, g := range gpus {
		infos[i] = g.info()
	}
	slices.SortFunc(infos, func(a, b gpuInfo) int {
		return cmp.Or(cmp.Compare(a.g.host, b.g.host), cmp.Compare(a.index, b.index), cmp.Compare(a.g.uuid, b.g.uuid))
	})
	simulated := false
	final := int64(math.MaxInt64)
	var newest int64 = noSecond
	for _, in := range infos {
		simulated = simulated || in.simulated
		switch {
		case in.finalTo > 0:
			final = min(final, in.finalTo/int64(time.Millisecond))
		case in.labelTo > 0:
			final = min(final, in.labelTo/int64(time.Millisecond))
		}
		newest = max(newest, in.newestSec)
	}
	if final == math.MaxInt64 {
		final = max(first, (newest+1)*1000)
	}
	final = min(max(floorDiv(final, step)*step, first), last)

	b := dst
	b = append(b, `{"source":`...)
	b = appendString(b, s.id)
	b = append(b, `,"simulated":`...)
	b = strconv.AppendBool(b, simulated)
	b = append(b, `,"now":`...)
	b = strconv.AppendInt(b, nowMS, 10)
	b = append(b, `,"from":`...)
	b = strconv.AppendInt(b, first, 10)
	b = append(b, `,"to":`...)
	b = strconv.AppendInt(b, nowMS, 10)
	b = append(b, `,"step_ms":`...)
	b = strconv.AppendInt(b, step, 10)
	b = append(b, `,"final_ms":`...)
	b = strconv.AppendInt(b, final, 10)
	b = append(b, `,"trace_url_template":`...)
	b = appendString(b, traceURL)
	b = append(b, `,"gpus":[`...)
	for i, in := range infos {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendGPU(b, in)
	}
	b = append(b, `],"time":[`...)
	for c := range ncols {
		if c > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, from+int64(c)*step, 10)
	}
	b = append(b, `],"series":{`...)

	// Per GPU: the columns' buckets, the labels, and what the summary needs.
	accs := make([]acc, ncols*int(NumSignals))
	labelCols := make([][numLabels]uint32, ncols)
	var shares [numLabels]float64
	var anomalies []byte
	labels := make([]byte, 0, 64+len(infos)*ncols*12)
	labels = append(labels, `"labels":{`...)
	for gi, in := range infos {
		clear(accs)
		clear(labelCols)
		in.g.read(from/1000, step/1000, ncols, accs, labelCols)
		in.g.labelTotals(first/1000, nowMS/1000, &shares)
		anomalies = in.g.anomalies(anomalies, in, nowMS/1000)
		if gi > 0 {
			b = append(b, ',')
			labels = append(labels, ',')
		}
		b = appendString(b, in.g.id)
		b = append(b, `:{`...)
		n := 0
		for sig := range NumSignals {
			if !in.has[sig] {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = appendSeries(b, sig, accs, ncols)
		}
		b = append(b, '}')
		labels = appendString(labels, in.g.id)
		labels = append(labels, ":["...)
		for c := range labelCols {
			if c > 0 {
				labels = append(labels, ',')
			}
			labels = appendDominant(labels, &labelCols[c])
		}
		labels = append(labels, ']')
	}
	b = append(b, "},"...)
	b = append(b, labels...)
	b = append(b, '}')
	b = s.appendRequests(b, q, first, nowMS)
	b = appendSummary(b, s, first, nowMS, &shares, anomalies)
	return append(b, '}')
}

func appendGPU(b []byte, in gpuInfo) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, in.g.id)
	b = append(b, `,"host":`...)
	b = appendString(b, in.g.host)
	b = append(b, `,"uuid":`...)
	b = appendString(b, in.g.uuid)
	b = append(b, `,"index":`...)
	if in.index >= 0 {
		b = strconv.AppendInt(b, int64(in.index), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"name":`...)
	b = appendString(b, in.name)
	b = append(b, `,"simulated":`...)
	b = strconv.AppendBool(b, in.simulated)
	b = append(b, `,"memory_total_bytes":`...)
	b = appendKnown(b, in.memTotal, 64)
	b = append(b, `,"power_limit_w":`...)
	b = appendKnown(b, in.powerLimit, 64)
	return append(b, '}')
}

// appendKnown writes v, or null for 0 (unknown).
func appendKnown(b []byte, v float64, bits int) []byte {
	if v == 0 {
		return append(b, "null"...)
	}
	return appendFloat(b, v, bits)
}

func appendFloat(b []byte, v float64, bits int) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', -1, bits)
}

// read aggregates the buckets of ncols columns of width step seconds from
// second from into accs (column-major by signal) and the label time into
// labels.
func (g *GPU) read(from, step int64, ncols int, accs []acc, labels [][numLabels]uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := int64(len(g.secs))
	lo := max(from, g.newestSec-n+1)
	hi := min(from+step*int64(ncols), g.newestSec+1)
	for sec := lo; sec < hi; sec++ {
		i := int(floorMod(sec, n))
		if g.secs[i] != sec {
			continue
		}
		c := int((sec - from) / step)
		row := g.buckets[i*int(NumSignals) : (i+1)*int(NumSignals)]
		col := accs[c*int(NumSignals) : (c+1)*int(NumSignals)]
		for sig := range row {
			bk := &row[sig]
			if bk.n == 0 {
				continue
			}
			a := &col[sig]
			if a.n == 0 {
				a.min, a.max = bk.min, bk.max
			} else {
				a.min, a.max = min(a.min, bk.min), max(a.max, bk.max)
			}
			a.sum += float64(bk.sum)
			a.n += uint64(bk.n)
		}
		ls := &g.labels[i]
		for l := range ls {
			labels[c][l] += uint32(ls[l])
		}
	}
}

// labelTotals adds the GPU's label seconds in [from, to] (seconds) to t.
func (g *GPU) labelTotals(from, to int64, t *[numLabels]float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := int64(len(g.secs))
	for sec := max(from, g.newestSec-n+1); sec <= min(to, g.newestSec); sec++ {
		i := int(floorMod(sec, n))
		if g.secs[i] != sec {
			continue
		}
		for l, ms := range g.labels[i] {
			t[l] += float64(ms) / 1000
		}
	}
}

// window returns the signal's mean and max over seconds [from, to], the
// first second it reached atLeast, and whether it had samples.
func (g *GPU) window(sig Signal, from, to int64, atLeast float64) (mean, mx float64, since int64, ok bool) {
	n := int64(len(g.secs))
	var sum float64
	var cnt uint64
	since = -1
	for sec := max(from, g.newestSec-n+1); sec <= min(to, g.newestSec); sec++ {
		i := int(floorMod(sec, n))
		if g.secs[i] != sec {
			continue
		}
		bk := &g.buckets[i*int(NumSignals)+int(sig)]
		if bk.n == 0 {
			continue
		}
		if cnt == 0 || float64(bk.max) > mx {
			mx = float64(bk.max)
		}
		if since < 0 && float64(bk.max) >= atLeast {
			since = sec
		}
		sum += float64(bk.sum)
		cnt += uint64(bk.n)
	}
	if cnt == 0 {
		return 0, 0, -1, false
	}
	return sum / float64(cnt), mx, since, true
}

// anomalies appends what is anomalous on the GPU over the last minute.
func (g *GPU) anomalies(b []byte, in gpuInfo, now int64) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	from := now - anomalyWindow + 1
	name := fmt.Sprintf("GPU %d", in.index)
	if in.index < 0 {
		name = "GPU " + g.uuid
	}
	add := func(kind string, since int64, text string) {
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"gpu":`...)
		b = appendString(b, g.id)
		b = append(b, `,"kind":`...)
		b = appendString(b, kind)
		b = append(b, `,"since":`...)
		b = strconv.AppendInt(b, since*1000, 10)
		b = append(b, `,"text":`...)
		b = appendString(b, text)
		b = append(b, '}')
	}
	if g.newestSec != noSecond && now-g.newestSec >= anomalyStale {
		add("stale", g.newestSec+1, fmt.Sprintf("%s: no data for %d s", name, now-g.newestSec))
		return b
	}
	if m, _, since, ok := g.window(PowerThrottled, from, now, throttledAtAll); ok && m >= anomalyPowerShare {
		add("power_throttled", since, fmt.Sprintf("%s power-throttled %.0f%% of the last minute", name, 100*m))
	}
	if m, _, since, ok := g.window(ThermalThrottled, from, now, throttledAtAll); ok && m >= anomalyThermal {
		add("thermal_throttled", since, fmt.Sprintf("%s thermal-throttled %.0f%% of the last minute", name, 100*m))
	}
	if in.memTotal > 0 {
		if _, mx, since, ok := g.window(MemoryUsed, from, now, anomalyMemoryShare*in.memTotal); ok && mx >= anomalyMemoryShare*in.memTotal {
			add("memory_full", since, fmt.Sprintf("%s memory %.0f%% full", name, 100*mx/in.memTotal))
		}
	}
	if _, mx, since, ok := g.window(Temperature, from, now, anomalyTemperature); ok && mx >= anomalyTemperature {
		add("hot", since, fmt.Sprintf("%s at %.0f °C", name, mx))
	}
	return b
}

func appendSeries(b []byte, sig Signal, accs []acc, ncols int) []byte {
	b = appendString(b, signalNames[sig])
	for k, part := range [...]string{`:{"min":[`, `],"max":[`, `],"mean":[`} {
		b = append(b, part...)
		for c := range ncols {
			if c > 0 {
				b = append(b, ',')
			}
			a := &accs[c*int(NumSignals)+int(sig)]
			if a.n == 0 {
				b = append(b, "null"...)
				continue
			}
			switch k {
			case 0:
				b = appendFloat(b, float64(a.min), 32)
			case 1:
				b = appendFloat(b, float64(a.max), 32)
			default:
				b = appendFloat(b, a.sum/float64(a.n), 32)
			}
		}
	}
	return append(b, "]}"...)
}

// appendDominant writes the label holding the column longest, or null.
func appendDominant(b []byte, ms *[numLabels]uint32) []byte {
	best := -1
	for l, v := range ms {
		if v > 0 && (best < 0 || v > ms[best]) {
			best = l
		}
	}
	if best < 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = append(b, labelNames[best]...)
	return append(b, '"')
}

// appendRequests writes requests_seq and the requests overlapping
// [from, to] (ms), after q.RequestsAfter, the newest MaxRequestsSent, in
// sequence order.
func (s *Source) appendRequests(b []byte, q Query, from, to int64) []byte {
	fromNS, toNS := from*int64(time.Millisecond), (to+1)*int64(time.Millisecond)
	s.reqMu.RLock()
	defer s.reqMu.RUnlock()
	b = append(b, `,"requests_seq":`...)
	b = strconv.AppendUint(b, s.seq, 10)
	b = append(b, `,"requests":[`...)
	// Newest first to find the newest MaxRequestsSent, then written oldest
	// first.
	n := len(s.reqs)
	picked := make([]int, 0, min(n, 256))
	for k := n - 1; k >= 0 && len(picked) < MaxRequestsSent; k-- {
		r := &s.reqs[(s.head+k)%n]
		if q.HasAfter && r.seq <= q.RequestsAfter {
			break // older ones are older still
		}
		if r.end >= fromNS && r.start <= toNS {
			picked = append(picked, (s.head+k)%n)
		}
	}
	for i := len(picked) - 1; i >= 0; i-- {
		if i < len(picked)-1 {
			b = append(b, ',')
		}
		b = appendRecord(b, &s.reqs[picked[i]])
	}
	return append(b, ']')
}

func appendRecord(b []byte, r *record) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.seq, 10)
	b = append(b, `,"trace_id":"`...)
	b = hex.AppendEncode(b, r.traceID[:])
	b = append(b, `","span_id":"`...)
	b = hex.AppendEncode(b, r.spanID[:])
	b = append(b, `","gpus":[`...)
	for i, g := range r.gpus {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, g)
	}
	b = append(b, `],"model":`...)
	b = appendString(b, r.model)
	b = append(b, `,"family":`...)
	b = appendString(b, r.family)
	b = append(b, `,"start":`...)
	b = strconv.AppendInt(b, r.start/int64(time.Millisecond), 10)
	b = append(b, `,"end":`...)
	b = strconv.AppendInt(b, r.end/int64(time.Millisecond), 10)
	b = append(b, `,"bottleneck":`...)
	b = appendLabel(b, r.label)
	b = append(b, `,"bottleneck_share":`...)
	b = appendShare(b, r.share)
	b = append(b, `,"energy_j":`...)
	b = appendFloat(b, r.energy, 64)
	b = append(b, `,"energy_per_token_j":`...)
	b = appendFloat(b, r.perToken, 64)
	b = append(b, `,"input_tokens":`...)
	b = appendTokens(b, r.inTok)
	b = append(b, `,"output_tokens":`...)
	b = appendTokens(b, r.outTok)
	b = append(b, `,"simulated":`...)
	b = strconv.AppendBool(b, r.simulated)
	b = append(b, `,"phases":[`...)
	for i := range int(r.nPhases) {
		p := &r.phases[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, p.name)
		b = append(b, `,"start":`...)
		b = strconv.AppendInt(b, p.start/int64(time.Millisecond), 10)
		b = append(b, `,"end":`...)
		b = strconv.AppendInt(b, p.end/int64(time.Millisecond), 10)
		b = append(b, `,"bottleneck":`...)
		b = appendLabel(b, p.label)
		b = append(b, `,"bottleneck_share":`...)
		b = appendShare(b, p.share)
		b = append(b, `,"energy_j":`...)
		b = appendFloat(b, p.energy, 64)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendShare writes a share to three decimals, null when unknown.
func appendShare(b []byte, v float32) []byte {
	if v <= 0 {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, math.Round(float64(v)*1000)/1000, 'f', -1, 64)
}

func appendLabel(b []byte, c uint8) []byte {
	if c == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = append(b, labelName(c)...)
	return append(b, '"')
}

func appendTokens(b []byte, n int64) []byte {
	if n < 0 {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, n, 10)
}

// appendSummary writes the summary over [from, to] (ms).
func appendSummary(b []byte, s *Source, from, to int64, shares *[numLabels]float64, anomalies []byte) []byte {
	b = append(b, `,"summary":{"bottleneck_share":{`...)
	var total float64
	for _, v := range shares {
		total += v
	}
	n := 0
	for l, v := range shares {
		if v <= 0 {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendString(b, labelNames[l])
		b = append(b, ':')
		b = strconv.AppendFloat(b, v/total, 'g', 4, 64)
	}
	fromNS, toNS := from*int64(time.Millisecond), (to+1)*int64(time.Millisecond)
	var energies, perToken []float64
	count := 0
	s.reqMu.RLock()
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.end < fromNS || r.end > toNS {
			continue
		}
		count++
		if !math.IsNaN(r.energy) {
			energies = append(energies, r.energy)
		}
		if !math.IsNaN(r.perToken) {
			perToken = append(perToken, r.perToken)
		}
	}
	s.reqMu.RUnlock()
	b = append(b, `},"energy_per_request_j":`...)
	b = appendPercentiles(b, energies)
	b = append(b, `,"energy_per_token_j":`...)
	b = appendPercentiles(b, perToken)
	b = append(b, `,"requests":`...)
	b = strconv.AppendInt(b, int64(count), 10)
	b = append(b, `,"anomalies":[`...)
	b = append(b, anomalies...)
	return append(b, "]}"...)
}

// appendPercentiles writes p50, p90 and p99 (nearest rank) of v, or null.
func appendPercentiles(b []byte, v []float64) []byte {
	if len(v) == 0 {
		return append(b, "null"...)
	}
	slices.Sort(v)
	for i, p := range [...]struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = appendString(b, p.name)
		b = append(b, ':')
		k := int(math.Ceil(p.q*float64(len(v)))) - 1
		b = appendFloat(b, v[max(k, 0)], 64)
	}
	return append(b, '}')
}
