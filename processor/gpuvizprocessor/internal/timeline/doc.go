// Package timeline is the gpuviz processor's memory of what each GPU did.
//
// The processor sees GPU metrics (hw.power, hw.gpu.utilization, the driver's
// ~6/s samples, GPM activity every scrape, hw.energy, ...) pass through the
// collector, and later an inference request's span, whose time window it must
// explain: how busy was the GPU, how much energy did it draw, was it
// throttled. Spans arrive seconds to minutes after the metrics that describe
// them, so the metrics side writes a per-GPU timeline into a Store and the
// traces side reads windows out of it. The Store is bounded in memory, safe
// for concurrent use, and cheap to write: the processor must absorb about a
// million GPU data points per second on one core, so Add is O(1) and does not
// allocate once a GPU's rings are full.
//
// # Samples are step functions read backwards
//
// Each Signal of a GPU is a series of samples (ts, v). NVML's utilisation and
// power readings are averages over the period before the reading, and GPM
// and throughput metrics describe the interval since the previous scrape, so
// a sample describes the stretch of time before it:
//
//	(max(prevTs, ts−MaxSpan), ts]
//
// where prevTs is the timestamp of the previous sample of the same signal of
// that GPU. A signal's first sample describes (ts − min(MaxSpan, 1s), ts]: one
// second, NVML's averaging period, as nothing says more. MaxSpan caps the
// stretch so that a gap in collection (a collector restart, a lost scrape) is
// not filled with a guess: past MaxSpan the signal is unknown. A point that
// has been dropped (ring overwrite, Retention) still counts as the previous
// sample of the oldest point kept, so dropping history never stretches or
// shrinks what the remaining points describe.
//
// Points normally arrive in order. An out-of-order point (older than the
// signal's newest) is inserted in order, which may cost O(n). It is refused
// when it would be dropped at once: older than the GPU's newest point minus
// Retention, not newer than a point this signal has already dropped, or
// older than every point of a full ring.
// A point with exactly the timestamp of a kept point replaces its value.
// NaN and ±Inf values, and timestamps outside what Unix nanoseconds can hold
// (years 1678 to 2262, including the zero time.Time), are refused.
//
// # Windows
//
// Window(k, from, to) gives, per signal, the time-weighted mean and the max
// of the step function over the parts of [from, to] the signal covers, and
// how many seconds it covered (0: nothing is known). Coverage is the fraction
// of the window covered by Utilization or by Power, whichever covers more: it
// says how much of the window the GPU was watched at all.
//
// Energy prefers the hw.energy counter (AddEnergy): when counter points exist
// at or around both edges, the energy is E(to) − E(from), interpolating the
// counter linearly between its points. A counter that decreases (driver
// reload) makes the segment across the decrease unknown; a window that needs
// it falls back. The fallback is the integral of the Power step function over
// its covered part, which undercounts a partly covered window (Stats[Power]
// .Seconds says by how much it is blind). With neither, EnergySource is
// EnergyNone. Counter points are not capped by MaxSpan: a cumulative counter
// is exact over any gap, only its split inside the gap is a guess.
//
// Intervals(k, from, to, dst) cuts [from, to] at every sample timestamp of
// the GPU (all signals and the energy counter) and at every stretch start
// that is not a sample timestamp (a MaxSpan cap, a first sample's second),
// so that every signal's value is constant inside each interval. It keeps the
// intervals some signal or a usable counter segment covers, and gives each
// the values in effect (Has false where a signal says nothing) and its energy
// by the same rules as Window: the counter when the counter segment under the
// interval is usable, else Power times the interval's length. When the whole
// window's energy comes from one source, the intervals' energies add up to
// Window's EnergyJ (up to floating-point rounding).
//
// # Retention and bounds
//
// Per GPU and signal, a ring keeps at most MaxPointsPerSignal points (the
// oldest overwritten). Points older than the GPU's newest point (any signal)
// minus Retention are dropped: lazily, as the ring is written, and hidden
// from readers meanwhile. Rings are allocated on first use with 16 points and
// double up to MaxPointsPerSignal, so a signal that arrives every 10 s keeps
// about 128 points for 15 minutes instead of a full ring. A point is 16
// bytes; the worst case is
//
//	MaxGPUs × (NumSignals + 1) × MaxPointsPerSignal × 16 B   (+1: the energy counter)
//	+ MaxGPUs × (~1 KiB of per-GPU state + 64 processes × 16 B)
//
// which is 4 GiB + 8 MiB at DefaultConfig (4096 GPUs). A real GPU sends three
// signals at ~6/s (utilisation, memory controller, power) and the rest once
// per scrape: about 220 KiB per GPU with the defaults, so 1.8 MiB for an
// 8-GPU node and about 900 MiB for 4096 GPUs. New GPUs beyond MaxGPUs are
// refused until Expire forgets idle ones.
//
// # Directory
//
// To match a span to GPUs the processor also needs who is where: the NVML
// index of each GPU (SetIndex, from nvidia.gpu.info, looked up per host by
// ByIndex) and the processes seen on each GPU (SetProcess, looked up by
// ProcessGPUs). At most 64 processes are remembered per GPU (the one seen
// longest ago is forgotten first) and a process counts only while it was
// seen within Retention of its GPU's newest point. Directory entries live
// and die with their GPU: SetIndex and SetProcess create the GPU (within
// MaxGPUs) and Expire removes them with it.
//
// # Concurrency
//
// One sync.RWMutex guards the Store. Add is tens of nanoseconds under the
// write lock, so sharding would buy little at a million points per second
// and cost simplicity; Window, Intervals and the lookups hold only the read
// lock, so readers do not wait on each other.
package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
