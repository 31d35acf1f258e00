package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// dcgm-exporter as a source. Its series reach the processor through the
// prometheus receiver, which keeps dcgm-exporter's metric names as they are
// (DCGM_FI_*), turns every label into a data point attribute and puts the
// scrape's job and instance on the resource. A GPU is keyed by the UUID
// (uuid with --use-old-namespace) and Hostname labels (hostname since
// dcgm-exporter #655; the resource's host.name where neither is present);
// the gpu label is its index, the pod, namespace and container labels
// (pod_name, pod_namespace, container_name with dcgm-exporter's old names)
// the pod that holds it. Series of a MIG instance (GPU_I_ID set) name the
// pod on its parent GPU and feed only the whole GPU's fields
// (dcgmWholeGPUFields): the timeline is per GPU.
//
// Every DCGM point goes through addFrom(sourceDCGM, ...): the gpuviz
// receiver's own point of a signal supersedes DCGM's (see precedence).

// dcgmBackend is gpuviz.backend for data from dcgm-exporter.
const dcgmBackend = "dcgm"

// Unit conversions of dcgm-exporter's fields (etc/default-counters.csv,
// etc/dcp-metrics-included.csv).
const (
	mib             = 1 << 20 // FB_USED, FB_FREE, FB_RESERVED: MiB
	dcgmPercent     = 0.01    // GPU_UTIL, MEM_COPY_UTIL: percent
	dcgmMilliJoule  = 1e-3    // TOTAL_ENERGY_CONSUMPTION: mJ since the driver loaded
	dcgmKilobyte    = 1000    // PCIE_TX/RX_THROUGHPUT: KB/s (NVML's PCIe throughput, as the receiver converts it)
	dcgmNanoseconds = 1e-9    // POWER_VIOLATION, THERMAL_VIOLATION: ns, cumulative (dcgm_fields.h)
)

// dcgmMaxValue bounds what a DCGM field may say, before conversion: far
// above any real reading (an energy counter of 1 kW for 30 years is 1e15
// mJ), far below where the timeline's running sums (value × ns) would
// overflow. A scraped endpoint is foreign text; a value beyond it is
// refused as bad_value.
const dcgmMaxValue = 1e18

// The clock event (throttle) reason bits of DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
// and DCGM_FI_DEV_CLOCKS_EVENT_REASONS, NVML's nvmlClocksEventReason*
// values, grouped as the receiver's nvidia.gpu.throttle.active reasons are
// (ingestBatch.throttleFlag): sw_power_cap, hw_slowdown and hw_power_brake
// are power; the two thermal slowdowns thermal.
const (
	clocksEventSwPowerCap        = 0x4
	clocksEventHwSlowdown        = 0x8
	clocksEventSwThermalSlowdown = 0x20
	clocksEventHwThermalSlowdown = 0x40
	clocksEventHwPowerBrake      = 0x80

	clocksEventPower   = clocksEventSwPowerCap | clocksEventHwSlowdown | clocksEventHwPowerBrake
	clocksEventThermal = clocksEventSwThermalSlowdown | clocksEventHwThermalSlowdown
)

// dcgmHandlers is the DCGM half of the one table from metric name to
// handler (ingest.go's handlers is the gpuviz half): ingestBatch.metric
// looks a name up in both and keys DCGM's points by their labels.
var dcgmHandlers = map[string]handler{
	// Utilisation: GR_ENGINE_ACTIVE (profiling, averaged over DCGM's
	// sampling period) is preferred to GPU_UTIL (NVML's sampled kernel
	// time) where dcgm-exporter sends both.
	"DCGM_FI_DEV_GPU_UTIL":            dcgmFallback(timeline.Utilization, dcgmPercent, dcgmPreferUtil),
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE":   dcgmPreferred(timeline.Utilization, 1, dcgmPreferUtil),
	"DCGM_FI_DEV_MEM_COPY_UTIL":       dcgmGauge(timeline.MemoryController, dcgmPercent),
	"DCGM_FI_PROF_SM_ACTIVE":          dcgmGauge(timeline.SMActivity, 1),
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": dcgmGauge(timeline.TensorActivity, 1),
	"DCGM_FI_PROF_DRAM_ACTIVE":        dcgmGauge(timeline.DRAMActivity, 1),
	"DCGM_FI_DEV_POWER_USAGE":         dcgmGauge(timeline.Power, 1),
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": func(in *ingest, b *ingestBatch, p point) {
		b.energyFrom(sourceDCGM, p.key, p.ts, p.v*dcgmMilliJoule)
	},
	"DCGM_FI_DEV_FB_USED": func(in *ingest, b *ingestBatch, p point) {
		b.addFrom(sourceDCGM, p.key, timeline.MemoryUsed, p.ts, p.v*mib)
		in.state(p.key).dcgm.framebuffer(b, p, fbUsed)
	},
	"DCGM_FI_DEV_FB_FREE": func(in *ingest, b *ingestBatch, p point) {
		in.state(p.key).dcgm.framebuffer(b, p, fbFree)
	},
	"DCGM_FI_DEV_FB_RESERVED": func(in *ingest, b *ingestBatch, p point) {
		in.state(p.key).dcgm.framebuffer(b, p, fbReserved)
	},
	// PCIe: the profiling rates (bytes/s over DCGM's sampling period,
	// headers included) are preferred to NVML's throughput snapshot.
	"DCGM_FI_PROF_PCIE_RX_BYTES":         dcgmPreferred(timeline.PCIeRx, 1, dcgmPreferPCIe),
	"DCGM_FI_PROF_PCIE_TX_BYTES":         dcgmPreferred(timeline.PCIeTx, 1, dcgmPreferPCIe),
	"DCGM_FI_DEV_PCIE_RX_THROUGHPUT":     dcgmFallback(timeline.PCIeRx, dcgmKilobyte, dcgmPreferPCIe),
	"DCGM_FI_DEV_PCIE_TX_THROUGHPUT":     dcgmFallback(timeline.PCIeTx, dcgmKilobyte, dcgmPreferPCIe),
	"DCGM_FI_PROF_NVLINK_RX_BYTES":       dcgmGauge(timeline.NVLinkRx, 1),
	"DCGM_FI_PROF_NVLINK_TX_BYTES":       dcgmGauge(timeline.NVLinkTx, 1),
	"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": dcgmClockEvents,
	"DCGM_FI_DEV_CLOCKS_EVENT_REASONS":   dcgmClockEvents,
	"DCGM_FI_DEV_POWER_VIOLATION":        dcgmViolation(throttlePower),
	"DCGM_FI_DEV_THERMAL_VIOLATION":      dcgmViolation(throttleThermal),
	// Read for the live view only.
	"DCGM_FI_DEV_GPU_TEMP": viewGauge(view.Temperature, 1),
	"DCGM_FI_DEV_SM_CLOCK": viewGauge(view.SMClock, 1), // MHz
}

// dcgmWholeGPUFields are the fields of the whole GPU, which DCGM repeats
// on each GPU instance of a MIG GPU (with the parent's UUID): dcgm-exporter
// watches only the instances of a MIG GPU by default (-d f), so these
// series are all the GPU's power, energy, clocks and throttling there are.
// An instance's own readings (profiling, framebuffer) are not the GPU's.
var dcgmWholeGPUFields = map[string]bool{
	"DCGM_FI_DEV_POWER_USAGE":              true,
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": true,
	"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS":   true,
	"DCGM_FI_DEV_CLOCKS_EVENT_REASONS":     true,
	"DCGM_FI_DEV_POWER_VIOLATION":          true,
	"DCGM_FI_DEV_THERMAL_VIOLATION":        true,
	"DCGM_FI_DEV_GPU_TEMP":                 true,
	"DCGM_FI_DEV_SM_CLOCK":                 true,
}

// dcgmPerPodShareFields are the fields dcgm-exporter with
// --kubernetes-virtual-gpus sends as the GPU's series (no pod labels)
// followed by one series per pod sharing the GPU with that pod's processes'
// share (transformation/kubernetes.go, createPerProcessMetrics): the
// shares are not the GPU's reading.
var dcgmPerPodShareFields = map[string]bool{
	"DCGM_FI_DEV_GPU_UTIL": true,
	"DCGM_FI_DEV_FB_USED":  true,
}

// dcgmPreference names a signal two DCGM fields feed, one preferred.
type dcgmPreference uint8

const (
	dcgmPreferUtil dcgmPreference = iota
	dcgmPreferPCIe
	numDCGMPreferences
)

// dcgmGauge feeds a signal from a DCGM field, scaled to the timeline's unit.
func dcgmGauge(sig timeline.Signal, scale float64) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		b.addFrom(sourceDCGM, p.key, sig, p.ts, p.v*scale)
	}
}

// dcgmPreferred feeds a signal from the field preferred for it, and notes
// that the GPU has that field.
func dcgmPreferred(sig timeline.Signal, scale float64, pref dcgmPreference) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		in.state(p.key).dcgm.preferred[pref] = true
		b.addFrom(sourceDCGM, p.key, sig, p.ts, p.v*scale)
	}
}

// dcgmFallback feeds a signal from a field only while the GPU has not sent
// the preferred one. Within one scrape the preferred field's point, at the
// same timestamp, replaces the fallback's.
func dcgmFallback(sig timeline.Signal, scale float64, pref dcgmPreference) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		if !in.state(p.key).dcgm.preferred[pref] {
			b.addFrom(sourceDCGM, p.key, sig, p.ts, p.v*scale)
		}
	}
}

// dcgmClockEvents reads the clock event reasons bitmask into the 0/1
// power and thermal throttle flags of the moment, which measured shares
// (the violation counters) replace where the GPU sends them.
func dcgmClockEvents(in *ingest, b *ingestBatch, p point) {
	if p.v < 0 || p.v > 1<<53 {
		b.refuse("bad_value")
		return
	}
	mask := uint64(p.v)
	b.dcgmThrottleFlag(p.key, p.ts, mask&clocksEventPower != 0, mask&clocksEventThermal != 0)
}

// dcgmViolation turns a cumulative violation time (ns) into the share of
// the interval since its previous point the clocks were held, as the
// receiver's nvidia.gpu.throttle.time becomes one.
func dcgmViolation(group throttleGroup) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		g := in.state(p.key)
		share, ok := g.dcgm.violationShare(group, p.ts, p.v*dcgmNanoseconds)
		if !ok {
			return
		}
		sig := timeline.PowerThrottled
		if group == throttleThermal {
			sig = timeline.ThermalThrottled
		}
		b.addFrom(sourceDCGM, p.key, sig, p.ts, share)
	}
}

// dcgmIngest is what turning one GPU's DCGM series into signals needs.
type dcgmIngest struct {
	seen      bool // a DCGM point came for this GPU: its backend includes dcgm
	preferred [numDCGMPreferences]bool
	// The newest framebuffer used, free and reserved (MiB): one scrape's,
	// at one timestamp, make the memory limit.
	fb        [numFBParts]counterPoint
	violation [numThrottleGroups]counterPoint // cumulative seconds
	// last and prev are the two newest distinct timestamps (Unix ns) of
	// DCGM points the timeline took: when DCGM's data has arrived, and how
	// often it comes.
	last, prev int64
}

// learned notes a DCGM point the timeline took at t (Unix ns).
func (d *dcgmIngest) learned(t int64) {
	if t > d.last {
		d.prev, d.last = d.last, t
	}
}

// fbPart names one of the framebuffer fields the memory limit adds up.
type fbPart uint8

const (
	fbUsed fbPart = iota
	fbFree
	fbReserved
	numFBParts
)

// framebuffer takes FB_USED, FB_FREE or FB_RESERVED and feeds the memory
// limit, the GPU's whole framebuffer, once used and free of one timestamp
// are known: DCGM reads them with nvmlDeviceGetMemoryInfo_v2 (driver 510
// on), whose used leaves out what the driver reserves, so the total is
// used + free + reserved, the reserved of that timestamp where it came
// (the receiver's hw.gpu.memory.limit is NVML's total). A scrape's fields
// come in any order: a reserved after the pair replaces the limit of that
// timestamp the pair made.
func (d *dcgmIngest) framebuffer(b *ingestBatch, p point, part fbPart) {
	d.fb[part] = counterPoint{ts: p.ts, total: p.v, ok: true}
	used, free, reserved := d.fb[fbUsed], d.fb[fbFree], d.fb[fbReserved]
	if !used.ok || !free.ok || !used.ts.Equal(p.ts) || !free.ts.Equal(p.ts) {
		return
	}
	limit := used.total + free.total
	if reserved.ok && reserved.ts.Equal(p.ts) {
		limit += reserved.total
	}
	b.addFrom(sourceDCGM, p.key, timeline.MemoryLimit, p.ts, limit*mib)
}

// violationShare returns the share of the interval from the group's
// previous point to ts that the counter grew by, clipped to 0..1; false for
// the first point, a point not after the previous one, and a counter that
// went back (DCGM or the driver restarted).
func (d *dcgmIngest) violationShare(group throttleGroup, ts time.Time, seconds float64) (float64, bool) {
	prev := d.violation[group]
	if prev.ok && !ts.After(prev.ts) {
		return 0, false
	}
	d.violation[group] = counterPoint{ts: ts, total: seconds, ok: true}
	if !prev.ok || seconds < prev.total {
		return 0, false
	}
	return min((seconds-prev.total)/ts.Sub(prev.ts).Seconds(), 1), true
}

// measured reports whether the GPU's violation counters give measured
// throttle shares, which replace the clock event flags.
func (d *dcgmIngest) measured() bool {
	return d.violation[throttlePower].ok || d.violation[throttleThermal].ok
}

// dcgmPod reads the pod a DCGM point names: pod and namespace, or the old
// pod_name and pod_namespace. exported_pod and exported_namespace come
// first: they are dcgm-exporter's pod and namespace where the scrape job
// sets pod or namespace target labels (Kubernetes service discovery's
// usual relabelling) without honor_labels, which name the exporter's own
// pod there.
func dcgmPod(p point) timeline.Pod {
	name := firstAttr(p.attrs, "exported_pod", "pod", "pod_name")
	if name == "" {
		return timeline.Pod{}
	}
	return timeline.Pod{Namespace: firstAttr(p.attrs, "exported_namespace", "namespace", "pod_namespace"), Name: name}
}

// firstAttr is the first of keys' string values that is not empty.
func firstAttr(m pcommon.Map, keys ...string) string {
	for _, k := range keys {
		if v := stringAttr(m, k); v != "" {
			return v
		}
	}
	return ""
}

// dcgmIndex reads the gpu label, the GPU's index; false when missing or
// not a number.
func dcgmIndex(p point) (int, bool) {
	i, err := strconv.Atoi(stringAttr(p.attrs, "gpu"))
	return i, err == nil && i >= 0
}
