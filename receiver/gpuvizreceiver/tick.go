package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// A tick is the fast readings of one GPU: a GPM sample (per GPU instance in
// MIG mode), instantaneous power and the cumulative throttle times. The tick
// that ends a flush interval also reads the energy counter, drains the
// driver's sample buffers (on GPUs with GPM the power buffer alone: GPM says
// more than the others), and records what no bottleneck label reads (SM
// occupancy, FP pipe activity, sync-boost time): points cost every exporter
// downstream. With
// samples.enabled the sampling clock ticks every samples.interval on a
// goroutine of the GPU's own; otherwise the scrape ticks once per
// collection interval. Either way one tickState is touched by one goroutine
// only, and the reading is plain values, recorded into a MetricsBuilder by
// whoever owns that builder.

// tickField is one field value of the tick's batched call.
type tickField uint8

const (
	fieldEnergy tickField = iota
	fieldPowerInstant
	fieldThrottleSwPowerCap
	fieldThrottleSyncBoost
	fieldThrottleSwThermal
	fieldThrottleHwThermal
	fieldThrottleHwPowerBrake
	numTickFields
)

var tickFieldIDs = [numTickFields]uint32{
	fieldEnergy:               nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION, // mJ
	fieldPowerInstant:         nvml.FI_DEV_POWER_INSTANT,            // mW; GetPowerUsage is a 1 s average
	fieldThrottleSwPowerCap:   nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
	fieldThrottleSyncBoost:    nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
	fieldThrottleSwThermal:    nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
	fieldThrottleHwThermal:    nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
	fieldThrottleHwPowerBrake: nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
}

var tickThrottleReasons = [numTickFields]metadata.AttributeNvidiaGpuThrottleReason{
	fieldThrottleSwPowerCap:   metadata.AttributeNvidiaGpuThrottleReasonSwPowerCap,
	fieldThrottleSyncBoost:    metadata.AttributeNvidiaGpuThrottleReasonSyncBoost,
	fieldThrottleSwThermal:    metadata.AttributeNvidiaGpuThrottleReasonSwThermalSlowdown,
	fieldThrottleHwThermal:    metadata.AttributeNvidiaGpuThrottleReasonHwThermalSlowdown,
	fieldThrottleHwPowerBrake: metadata.AttributeNvidiaGpuThrottleReasonHwPowerBrake,
}

func (f tickField) enabled(m *metadata.MetricsConfig) bool {
	switch f {
	case fieldEnergy:
		return m.HwEnergy.Enabled
	case fieldPowerInstant:
		return m.HwPower.Enabled
	}
	return m.NvidiaGpuThrottleTime.Enabled
}

// GPM availability, as nvidia.gpu.gpm.status reports it.
const (
	gpmUnavailable int32 = iota // no GPM on this GPU or driver, or it failed
	gpmActive
	gpmInUse // NVML says another client holds the counters
)

// migInstance is one MIG compute instance, as the scrape enumerates them.
type migInstance struct {
	uuid, profile string
	gi, ci        int64
}

// tickState is what one GPU's tick keeps between ticks.
type tickState struct {
	dev    nvml.Device
	handle *atomic.Pointer[nvml.Device] // the GPU's current handle (gpu.handle)
	logger *zap.Logger

	// req is the batched call; fields the GPU lacks are dropped. The energy
	// counter, when asked for, is its last field, and is asked for on flush
	// ticks only: a read costs milliseconds of CPU inside the driver (3.5
	// ms on an H200 with driver 580: 1.4% of a core per GPU at a 250 ms
	// tick), and the counter moves only every 100 ms. Where in the flush
	// interval the energy went is said by the driver's power samples,
	// drained at the flush, else by the power read every tick
	// (docs/hardware.md).
	req fieldRequest
	// energyCall and powerCall fall back to the dedicated calls where the
	// field is missing.
	energyCall, powerCall bool
	// last is the newest timestamp emitted per field (µs): a value the
	// driver has not refreshed since is not emitted twice.
	last [numTickFields]int64
	// totals carries the cumulative fields across a restart of the
	// driver's counters (a GPU reset).
	totals [numTickFields]continuingCounter

	gpm       *gpmState // nil when the GPU has no GPM
	gpmStatus atomic.Int32
	// migLayout is published by the scrape, which enumerates MIG devices;
	// migGPM holds the GPM buffers per GPU instance, owned by the tick.
	migLayout atomic.Pointer[[]migInstance]
	migGPM    map[int64]*migBuffers
	wantMIG   bool

	// samples: the driver's buffers, drained on flush ticks (nil: not read).
	samples *sampleState

	reading tickReading // reused every tick
}

// fieldPoint is one field value as read.
type fieldPoint struct {
	kind tickField
	ts   pcommon.Timestamp
	v    float64
}

// gpmValues are the GPM metrics of one interval, by gpmMetrics index.
type gpmValues struct {
	ok    bool
	valid [len(gpmMetrics)]bool
	v     [len(gpmMetrics)]float64
}

// migBuffers are one GPU instance's GPM buffers and the MIG devices
// (compute instances) it held at the last tick. A re-partition can give a
// new GPU instance the ID of one destroyed; the new one holds none of the
// old one's MIG devices (UUIDs), so an ID whose devices all changed is
// another instance, and its interval starts anew.
type migBuffers struct {
	gpm   *gpmState // nil: NVML could not allocate them
	uuids []string
}

type migActivity struct {
	inst migInstance
	gpm  gpmValues
}

// driverSample is one entry of a driver sample buffer.
type driverSample struct {
	kind int // index into sampleKinds
	ts   pcommon.Timestamp
	v    float64
}

// tickReading is what one tick read, in plain values.
type tickReading struct {
	at pcommon.Timestamp
	// flush is set on the tick that ends a flush interval.
	flush   bool
	fields  []fieldPoint
	gpm     gpmValues
	mig     []migActivity
	samples []driverSample
	// failed is the first call that failed this tick (SUCCESS if none);
	// what the other calls read is kept.
	failed nvml.Return
}

func newTickState(cfg *Config, syms symbols, lib nvml.Interface, handle *atomic.Pointer[nvml.Device], logger *zap.Logger) *tickState {
	m := &cfg.Metrics
	dev := *handle.Load()
	t := &tickState{dev: dev, handle: handle, logger: logger}
	for f := range numTickFields {
		if f != fieldEnergy && f.enabled(m) {
			t.req = append(t.req, nvml.FieldValue{FieldId: tickFieldIDs[f]})
		}
	}
	if fieldEnergy.enabled(m) {
		t.req = append(t.req, nvml.FieldValue{FieldId: tickFieldIDs[fieldEnergy]})
	}
	if syms.gpm && (gpmEnabled(m) || migGPMEnabled(m)) {
		if sup, ret := lib.GpmQueryDeviceSupport(dev); ret == nvml.SUCCESS && sup.IsSupportedDevice != 0 {
			t.gpm = newGPMState(lib)
		}
	}
	if t.gpm != nil {
		t.gpmStatus.Store(gpmActive)
		t.wantMIG = migGPMEnabled(m) && syms.gpmMIG
	}
	switch {
	case !cfg.Samples.Enabled:
	case t.gpm == nil && samplesEnabled(m):
		t.samples = &sampleState{}
	case t.gpm != nil && m.NvidiaGpuSamplesPower.Enabled:
		t.samples = &sampleState{}
		t.samples.powerOnly()
	}
	return t
}

// read makes the tick's calls at now; flush marks the tick that ends a
// flush interval. The reading stays valid until the next read.
func (t *tickState) read(lib nvml.Interface, syms symbols, now time.Time, flush bool) *tickReading {
	if dev := *t.handle.Load(); dev != t.dev {
		t.follow(lib, dev)
	}
	r := &t.reading
	r.at, r.flush = pcommon.NewTimestampFromTime(now), flush
	r.fields, r.mig, r.samples = r.fields[:0], r.mig[:0], r.samples[:0]
	r.gpm = gpmValues{}
	r.failed = nvml.SUCCESS
	t.readFields(syms, r, flush)
	if t.gpm != nil {
		t.readGPM(lib, now, r)
	}
	if flush && t.samples != nil {
		r.fail(t.samples.drain(t.dev, r))
	}
	return r
}

// follow moves the tick to the GPU's new handle (after a reset): GPM
// samples of the old handle cannot be compared with the new one's, so the
// buffers are taken anew, and the driver's timestamps may start over.
func (t *tickState) follow(lib nvml.Interface, dev nvml.Device) {
	hadGPM := t.gpm != nil
	t.free(lib)
	t.dev, t.last = dev, [numTickFields]int64{}
	if hadGPM {
		t.gpm = newGPMState(lib)
	}
	t.logger.Info("the sampling clock follows the GPU's new handle")
}

// continuingCounter continues a cumulative reading across restarts of
// the driver's counter: a GPU reset or a driver reload starts it again
// from zero, and what it counts since adds to what it had counted.
type continuingCounter struct {
	last, offset float64
}

func (c *continuingCounter) observe(x float64) float64 {
	if x < c.last {
		c.offset += c.last
	}
	c.last = x
	return c.offset + x
}

func (f tickField) cumulative() bool { return f != fieldPowerInstant }

func (r *tickReading) fail(ret nvml.Return) {
	if ret != nvml.SUCCESS && r.failed == nvml.SUCCESS {
		r.failed = ret
	}
}

// readFields reads the tick's fields, the energy counter on flush ticks
// only (see req).
func (t *tickState) readFields(syms symbols, r *tickReading, flush bool) {
	n := len(t.req)
	if !flush && n > 0 && t.req[n-1].FieldId == tickFieldIDs[fieldEnergy] {
		n--
	}
	dropped := func(v *nvml.FieldValue) {
		kind := kindOf(v.FieldId)
		switch kind {
		case fieldEnergy:
			t.energyCall = syms.totalEnergy
		case fieldPowerInstant:
			t.powerCall = true
		}
		t.logger.Info("GPU does not support a field value; it will not be asked again",
			zap.Uint32("field", v.FieldId), zap.Bool("fallback", t.energyCall && kind == fieldEnergy || t.powerCall && kind == fieldPowerInstant))
	}
	ret := t.req.askFirst(n, t.dev, func(v *nvml.FieldValue) { t.take(v, r) }, dropped)
	if ret == nvml.ERROR_NOT_SUPPORTED {
		// The batched call itself is not supported: no field is asked
		// again, as the scrape's readings do not ask an unsupported call.
		for i := range t.req {
			dropped(&t.req[i])
		}
		t.req, ret = nil, nvml.SUCCESS
	}
	r.fail(ret)
	if t.energyCall && flush {
		mj, ret := t.dev.GetTotalEnergyConsumption()
		r.fail(ret)
		if ret == nvml.SUCCESS {
			r.fields = append(r.fields, fieldPoint{fieldEnergy, r.at, t.totals[fieldEnergy].observe(float64(mj) / 1000)})
		}
	}
	if t.powerCall {
		mw, ret := t.dev.GetPowerUsage()
		r.fail(ret)
		if ret == nvml.SUCCESS {
			r.fields = append(r.fields, fieldPoint{fieldPowerInstant, r.at, float64(mw) / 1000})
		}
	}
}

// clockLimit is the latest driver timestamp (µs of the CPU's wall clock,
// as NVML stamps field values and samples) a reading at at can carry, with
// a second's slack. A newest timestamp past it means the clock stepped
// back (NTP after boot): waiting for the clock to pass it again would drop
// every reading until then.
func clockLimit(at pcommon.Timestamp) uint64 {
	return uint64(at)/1000 + 1_000_000
}

// take turns one answered field into a point, at the driver's timestamp
// for the value; a value not refreshed since the last tick is not taken
// twice.
func (t *tickState) take(v *nvml.FieldValue, r *tickReading) {
	if ret := nvml.Return(v.NvmlReturn); ret != nvml.SUCCESS {
		r.fail(ret)
		return
	}
	kind := kindOf(v.FieldId)
	ts := r.at
	if v.Timestamp > 0 {
		if uint64(t.last[kind]) > clockLimit(r.at) {
			t.last[kind] = 0 // the wall clock stepped back past the values before
		}
		if v.Timestamp <= t.last[kind] {
			return
		}
		t.last[kind] = v.Timestamp
		ts = pcommon.Timestamp(v.Timestamp * 1000)
	}
	x := decodeValue(nvml.ValueType(v.ValueType), v.Value)
	switch kind {
	case fieldEnergy:
		x /= 1000 // mJ
	case fieldPowerInstant:
		x /= 1000 // mW
	default:
		x /= 1e9 // ns
	}
	if kind.cumulative() {
		x = t.totals[kind].observe(x)
	}
	r.fields = append(r.fields, fieldPoint{kind, ts, x})
}

// kindOf is the tick field a field ID asks for.
func kindOf(id uint32) tickField {
	for f, fid := range tickFieldIDs {
		if fid == id {
			return tickField(f)
		}
	}
	panic("gpuvizreceiver: not a tick field")
}

func (t *tickState) readGPM(lib nvml.Interface, now time.Time, r *tickReading) {
	layout := t.migLayout.Load()
	if layout == nil || len(*layout) == 0 {
		req, ret := t.gpm.measure(lib, now, func(smp nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(t.dev, smp) })
		if ret == nvml.ERROR_NOT_SUPPORTED && t.inMIGMode() {
			return // GPM samples GPU instances: wait for the scrape's layout
		}
		t.gpmResult(ret)
		if req != nil {
			r.gpm.take(req)
		}
		t.releaseMIG(lib, nil)
		return
	}
	if !t.wantMIG {
		return
	}
	if t.migGPM == nil {
		t.migGPM = map[int64]*migBuffers{}
	}
	live := map[int64][]string{} // GPU instance → its MIG devices' UUIDs
	for _, inst := range *layout {
		live[inst.gi] = append(live[inst.gi], inst.uuid)
	}
	measured := map[int64]*gpmValues{}
	for _, inst := range *layout {
		v, done := measured[inst.gi]
		if !done {
			v = t.measureInstance(lib, now, inst.gi, live[inst.gi])
			measured[inst.gi] = v
		}
		if v != nil {
			r.mig = append(r.mig, migActivity{inst: inst, gpm: *v})
		}
	}
	t.releaseMIG(lib, live)
}

func (t *tickState) inMIGMode() bool {
	mode, _, ret := t.dev.GetMigMode()
	return ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE
}

// measureInstance runs GPU instance gi's GPM interval; nil until it has two
// samples of the instance holding the MIG devices uuids, or when GPM fails
// for it.
func (t *tickState) measureInstance(lib nvml.Interface, now time.Time, gi int64, uuids []string) *gpmValues {
	b, ok := t.migGPM[gi]
	if !ok {
		// gpm nil too: NVML could not allocate, do not retry every tick.
		b = &migBuffers{gpm: newGPMState(lib)}
		t.migGPM[gi] = b
	}
	buf := b.gpm
	if buf != nil && ok && !slices.ContainsFunc(uuids, func(u string) bool { return slices.Contains(b.uuids, u) }) {
		buf.havePrev = false // another instance under the ID: no rate across the two
	}
	b.uuids = uuids
	if buf == nil {
		return nil
	}
	req, ret := buf.measure(lib, now, func(smp nvml.GpmSample) nvml.Return { return lib.GpmMigSampleGet(t.dev, int(gi), smp) })
	t.gpmResult(ret)
	if req == nil {
		return nil
	}
	var v gpmValues
	v.take(req)
	return &v
}

// gpmResult follows what GPM calls answer, and says once when another
// client holds the counters.
func (t *tickState) gpmResult(ret nvml.Return) {
	st := gpmActive
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_IN_USE:
		st = gpmInUse
	default:
		st = gpmUnavailable
	}
	if prev := t.gpmStatus.Swap(st); prev != st {
		switch st {
		case gpmInUse:
			t.logger.Warn("GPM counters are held by another client (a profiler, or DCGM profiling on the same GPU): SM, tensor and DRAM activity are missing until it lets go; run gpuviz or DCGM profiling on a GPU, not both",
				zap.Error(ret))
		case gpmUnavailable:
			t.logger.Warn("GPM sampling failed: SM, tensor and DRAM activity are missing until it recovers", zap.Error(ret))
		default:
			t.logger.Info("GPM sampling works again")
		}
	}
}

// releaseMIG frees the GPM buffers of GPU instances that no longer exist
// (all of them when live is nil).
func (t *tickState) releaseMIG(lib nvml.Interface, live map[int64][]string) {
	for gi, b := range t.migGPM {
		if _, ok := live[gi]; !ok {
			if b.gpm != nil {
				b.gpm.free(lib)
			}
			delete(t.migGPM, gi)
		}
	}
}

// free releases every GPM buffer; the tick must not run again.
func (t *tickState) free(lib nvml.Interface) {
	if t.gpm != nil {
		t.gpm.free(lib)
		t.gpm = nil
	}
	t.releaseMIG(lib, nil)
}

func (v *gpmValues) take(req *nvml.GpmMetricsGetType) {
	v.ok = true
	for i := range gpmMetrics {
		m := &req.Metrics[i]
		v.valid[i] = nvml.Return(m.NvmlReturn) == nvml.SUCCESS
		v.v[i] = m.Value
	}
}

// recordTick records a reading of GPU g into mb; with runs, the inner
// points of runs of equal values are left out (see runs.go).
func recordTick(mb *metadata.MetricsBuilder, g *gpu, r *tickReading, runs *tickRuns) {
	for _, f := range r.fields {
		if f.kind == fieldThrottleSyncBoost && !r.flush {
			continue // cumulative: a flush's worth of resolution loses nothing
		}
		if runs == nil {
			recordField(mb, g, f.kind, f.ts, f.v)
			continue
		}
		runs.fields[f.kind].take(f.ts, f.v, func(ts pcommon.Timestamp, v float64) { recordField(mb, g, f.kind, ts, v) })
	}
	if r.gpm.ok {
		var gpmRuns *[len(gpmMetrics)]seriesRun
		if runs != nil {
			gpmRuns = &runs.gpm
		}
		recordGPM(mb, r.at, g, &r.gpm, r.flush, gpmRuns)
	}
	for i := range r.mig {
		recordMIGGPM(mb, r.at, g, &r.mig[i])
	}
	for _, smp := range r.samples {
		recordSample(mb, g, sampleKinds[smp.kind], smp.ts, smp.v)
	}
}

func recordField(mb *metadata.MetricsBuilder, g *gpu, kind tickField, ts pcommon.Timestamp, v float64) {
	switch kind {
	case fieldEnergy:
		mb.RecordHwEnergyDataPoint(ts, v, g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu)
	case fieldPowerInstant:
		mb.RecordHwPowerDataPoint(ts, v, g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu)
	default:
		mb.RecordNvidiaGpuThrottleTimeDataPoint(ts, v, g.id, g.name, tickThrottleReasons[kind])
	}
}
