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
// million GPU data points per second on one core, so Add is O(1)
// (amortised) and does not allocate once a GPU's rings are full.
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
// at or around both edges, the energy is E(to) − E(from). Whole counter
// segments inside the window count their difference exactly; a segment p→q
// cut by an edge gives the cut-off part [a, b] its share of q.v − p.v: in
// proportion to ∫_a^b Power / ∫_p^q Power when Power samples cover the
// segment with a positive integral (the counter sets the total, Power says
// where in the segment it went), else in proportion to time. Only Power's
// points up to q count, the part of the segment after the last of them (at
// most MaxSpan) at their mean: a source sends the counter stamped at its
// read with the power samples up to just before it, the one covering the
// rest a flush later, and the split must not change with it once a bin of
// the segment has been read. A counter that
// decreases (driver reload) makes the segment across the decrease unknown; a
// window that needs it falls back. The fallback is the integral of the Power
// step function over its covered part, which undercounts a partly covered
// window (Stats[Power].Seconds says by how much it is blind). With neither,
// EnergySource is EnergyNone. Counter points are not capped by MaxSpan: a
// cumulative counter is exact over any gap, only its split inside the gap is
// a guess.
//
// Bins(k, from, width, n, dst) gives the n fixed-width bins [from+i·width,
// from+(i+1)·width) the processor's per-round pipeline books: per signal the
// integral, the covered seconds and the max, and the bin's energy. A bin the
// counter's usable segments cover gets the counter's share (split by Power as
// above, so bins over whole segments add up to the counter's difference); a
// bin the counter covers only partly, or not at all, gets the Power integral
// if Power covers the whole bin; otherwise EnergyKnown is false and EnergyJ is
// what is known (the counter's parts plus Power over the covered rest).
//
// # Cost and precision
//
// Each point also carries two running sums over its ring: the integral of the
// step function (value·ns) and the covered ns up to that point (in the
// energy counter's ring, the number of decreases so far). A window's
// integral and coverage are then a difference of two of them plus the
// partial stretches at its edges, found by one binary search and one gallop
// from it: Window's means, seconds, coverage and energy cost O(log n) per
// signal, whatever the window's length. Stat.Max reads one block maximum per
// 32 points inside the window (kept as the ring is written) and scans at most
// about three blocks' worth at the edges. Bins walks each series once:
// O(log n + points in range + bins). An out-of-order point recomputes the
// sums from where it lands, and the block maxima: O(n), which inserting it
// already costs.
//
// The sums are float64 and rebased when the ring grows and whenever its
// start wraps around the buffer (O(n) once per n points dropped, so O(1) per
// point amortised): they sum at most two buffers' worth of points, not the
// GPU's lifetime. Whole stretches come from one difference of sums, off by at
// most about one ulp of the sums per stretch between the edges (each
// addition rounds once); the partial stretches at the edges are multiplied
// out and lose nothing to the sums' size. For power at 6/s in full 4096-point rings the sums
// stay below 2·10^15 W·ns, whose ulp is 0.25 W·ns: at most 2.5·10^-10 J per
// stretch, about 10^-12 of the window's energy at steady power, and far below
// what a reading is worth. Covered ns are int64 and exact. Counter
// differences are taken between stored counter values, exact for values
// within a factor two of each other.
//
// # Retention and bounds
//
// Per GPU and signal, a ring keeps at most MaxPointsPerSignal points (the
// oldest overwritten). Points older than the GPU's newest point (any signal)
// minus Retention are dropped: lazily, as the ring is written, and hidden
// from readers meanwhile. Rings are allocated on first use with 16 points and
// double up to MaxPointsPerSignal, so a signal that arrives every 10 s keeps
// about 128 points for 15 minutes instead of a full ring. A point is 32
// bytes (timestamp, value and the two running sums) plus 8 bytes of block
// maximum per 32 points; the worst case is
//
//	MaxGPUs × (NumSignals + 1) × MaxPointsPerSignal × 32.25 B   (+1: the energy counter)
//	+ MaxGPUs × (~1 KiB of per-GPU state + 64 processes × 16 B)
//
// which is 8.6 GiB + 8 MiB at DefaultConfig (4096 GPUs, 16 signals). A real
// GPU sends three signals at ~6/s (utilisation, memory controller, power) and
// the rest once per scrape: about 450 KiB per GPU with the defaults, so
// 3.6 MiB for an 8-GPU node and about 1.8 GiB for 4096 GPUs. New GPUs beyond MaxGPUs are
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
// and cost simplicity; Window, Bins and the lookups hold only the
// read lock, so readers do not wait on each other.
package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
