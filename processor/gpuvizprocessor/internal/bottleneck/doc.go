// Package bottleneck classifies one GPU sample interval: why the GPU was
// slow, or idle, during it. It is a pure function of the interval's signals
// and a set of thresholds: no I/O, no clock, no state. [Classify] labels one
// interval; [Dominant] picks the label that covered the most time among
// many, e.g. over the intervals an inference request spanned.
//
// # Signals
//
// [Inputs] carries what the gpuviz receiver measures, each as a share in
// 0..1 and each with a Has flag, because many are not measured everywhere
// (GPM needs Hopper or newer; NVML has no utilization in MIG mode; a
// metric may be switched off):
//
//   - Utilization: NVML utilization.gpu, "percent of time over the past
//     sample period during which one or more kernels was executing". It
//     says nothing of how much of the GPU a kernel used: one tiny kernel
//     running all the time reads 100% on a GPU that is almost entirely
//     idle. It is a coarse upper bound on work.
//   - MemoryController: NVML utilization.memory, the share of time device
//     memory was being read or written. It too is a share of time, not of
//     bandwidth: a trickle of traffic that never stops reads high.
//   - SMActivity (GPM SM_UTIL): the share of SM cycles, over all SMs and
//     the interval, with at least one warp resident. Unlike Utilization it
//     sees space as well as time: a kernel on 16 of 132 SMs reads 0.12.
//   - TensorActivity (GPM ANY_TENSOR_UTIL): the share of cycles the tensor
//     (matrix) pipes were issuing.
//   - DRAMActivity (GPM DRAM_BW_UTIL): the share of peak HBM bandwidth
//     used. This, not MemoryController, is the direct measure of a
//     memory-bandwidth-bound GPU.
//   - MemoryUsedFraction: memory used / memory total (capacity, not
//     traffic).
//   - PCIeFraction, NVLinkFraction: throughput / link capacity, the larger
//     direction.
//   - PowerThrottled, ThermalThrottled: the share of the interval the
//     clocks were held down by power reasons (software power cap, power
//     brake) or thermal ones (software and hardware thermal slowdown), from
//     NVML's clock event reasons.
//   - RequestsInFlight: inference requests known (from traces) to be
//     running on this GPU during the interval.
//
// # Labels
//
//   - idle: the GPU was mostly not working and no request was known to be
//     running on it.
//   - host_bound: the GPU was mostly not working although requests were
//     running on it: it was starved by the CPU (tokenisation, Python
//     overhead between kernel launches, sampling), the scheduler (batches
//     too small) or I/O.
//   - thermal_throttled: clocks were held down by temperature for at least
//     ThrottledShare of the interval.
//   - power_throttled: clocks were held down by the power limit for at
//     least ThrottledShare of the interval.
//   - memory_capacity: device memory was nearly full: there is no room for
//     more KV cache, so the inference scheduler queues or preempts requests
//     instead of growing the batch.
//   - interconnect_bound: a PCIe or NVLink link ran near its capacity: the
//     work waited on data moving between GPUs or to and from the host.
//   - memory_bound: HBM bandwidth was the limit. LLM decode is the typical
//     case: every step reads all the weights (shared by the batch) plus
//     each sequence's KV cache and does about one multiply-add per weight
//     per sequence, i.e. ~1 FLOP per byte per sequence in 16-bit, while an
//     H100 needs ~300 FLOP per byte (989 TFLOPS / 3.35 TB/s) to keep its
//     tensor cores fed; decode stays bandwidth bound up to batches of
//     hundreds.
//   - compute_bound: the SMs were the limit, typically tensor-core math.
//     LLM prefill is the typical case: the whole prompt goes through each
//     layer as one matrix multiply with thousands of rows, thousands of
//     FLOPs per byte, far past the ridge point.
//   - unknown: the signals do not say. Either no activity signal was
//     measured at all, or the GPU was busy but no measured resource was
//     near its limit (see rules 10 and 11).
//
// # Rules
//
// [Classify] applies these rules in order; the first that holds gives the
// label. A rule holds only on measured evidence: a signal whose Has flag is
// false, or whose value is NaN or infinite, is treated as not measured. It
// never triggers a rule and never counts as zero.
//
//  0. First, where power is read finer than the other signals, the
//     interval is placed within its readings (Inputs.HasPowerDetail: the
//     driver's 20 ms power samples against 250 ms GPM ticks and throttle
//     times). Under continuous batching a tick mixes compute-bound steps
//     (a prompt's chunk) with memory-bound ones (decodes only), and
//     throttled steps with free ones; a 100 ms interval inside it takes
//     the tick's average unless something finer says which steps it held.
//     Power does, two ways:
//     - Power rises with tensor work and falls with DRAM work. An interval
//     that drew ΔW more than the stretches of its activity readings (the
//     finer of tensor's and DRAM's: a series that holds one value keeps
//     only the ends of the run, so an idle GPU's zero tensor activity may
//     describe seconds) ran a share x = ΔW / (PowerSwing × PowerLimit) more
//     of its time at the tensor limit: its tensor activity moves by
//     x × TensorAtLimit, its DRAM activity by −x × DRAMAtLimit.
//     - A board its power limit throttles draws the limit. Throttle
//     readings throttled θ of their time at mean power R ran free at
//     F = (R − θL) / (1 − θ); an interval drawing P was throttled
//     (P − F) / (L − F) of its time, bounded by what the readings allow: at
//     most θ × span of it (their throttled time all inside it) and at least
//     1 − (1 − θ) × span (span the readings' length over the interval's).
//     Readings never throttled leave every interval in them unthrottled.
//     Only where F lies at least half the swing below the limit: an H200
//     running bf16 GEMMs at its 700 W cap was throttled 80% of the time and
//     drew 560-735 W per 100 ms either way, so there power says nothing of
//     when the clock was held.
//     Each moved value stays in [0, 1]. Without the power limit, or with
//     power no finer than the readings (then ΔW is about 0), nothing moves;
//     PowerSwing 0 turns rule 0 off.
//
//  1. Unknown when neither Utilization nor SMActivity is measured. Every
//     other label answers "why was the work slow", which needs to know
//     whether there was work; memory, link or throttle signals alone cannot
//     tell an idle GPU from a busy one.
//
//  2. Idle or host_bound when the GPU was mostly not working: SMActivity <
//     BusySMActivity where SM activity is measured, else Utilization <
//     IdleUtilization. SM activity decides when it is measured because it is
//     the finer signal: it catches the 100%-utilization GPU that ran one
//     small kernel at a time, and physically SM activity ≤ utilization, so
//     on consistent data a low utilization implies a low SM activity anyway.
//     The label is host_bound when RequestsInFlight > 0 (work existed and the
//     GPU did not get it), else idle.
//     Exception: when a bandwidth resource was saturated, i.e. a link at
//     InterconnectFraction or DRAM (GPM) at MemoryDRAM, the GPU was not idle
//     but waiting on that resource, and rule 2 does not apply. Two real cases:
//     a tensor-parallel all-reduce runs on the few SMs NCCL gives its channels
//     (low SM activity) while NVLink is saturated; a GPU swapping KV cache to
//     host memory, offloading weights or loading a model runs few kernels
//     while PCIe is saturated. The memory controller's busy time is not such
//     evidence: it counts any traffic, a PCIe copy trickling in included, so
//     it cannot overturn low activity.
//     Idle comes before the throttles because a throttle slows work, and
//     there was little work to slow.
//
//  3. thermal_throttled when ThermalThrottled ≥ ThrottledShare, then
//
//  4. power_throttled when PowerThrottled ≥ ThrottledShare. A throttle
//     explains slowness whatever the workload's shape: a compute-bound
//     GEMM at the power cap is limited by the power budget (the clock it
//     may run at), not by its FLOPs; a memory-bound decode at reduced
//     clocks issues loads slower. Thermal comes first when both hold:
//     thermal slowdown cuts clocks deeper than power capping, points to a
//     cooling fault rather than normal operation at the power limit, and a
//     hot die leaks more power, so heat can cause the power cap too.
//
//  5. memory_capacity when MemoryUsedFraction ≥ MemoryCapacityFraction.
//     With memory full the scheduler cannot grow the batch (it queues or
//     preempts), which caps throughput whatever the kernels are bound by.
//     It comes before the link and bandwidth rules because it is often
//     their cause: a full KV cache swapping to host memory saturates PCIe.
//
//  6. interconnect_bound when PCIeFraction or NVLinkFraction ≥
//     InterconnectFraction. Links are the narrowest pipes in the system
//     (PCIe 5 x16 ~64 GB/s and NVLink 4 ~450 GB/s per direction, against
//     3.35-4.8 TB/s of HBM), so while one is saturated the kernels wait on
//     it; the DRAM and SM activity of an all-reduce is a consequence of the
//     link, not a separate limit.
//
//  7. memory_bound when memory is saturated: DRAMActivity ≥ MemoryDRAM, or,
//     where DRAM activity is not measured (no GPM), MemoryController ≥
//     MemoryControllerBusy. When DRAM activity is measured the memory
//     controller is ignored: it is the cruder, time-based signal.
//     Against tensor work: where GPM measured both, the unit nearer what it
//     reaches as the limit wins, TensorActivity / TensorAtLimit against
//     DRAMActivity / DRAMAtLimit, whether or not the tensor pipes reached
//     ComputeTensor (rules 8-10 then give compute_bound). The activities
//     are shares of different peaks, and a unit that sets the pace reaches
//     neither: a step whose tensor math takes longer than its HBM traffic
//     can read the lower activity of the two, because GEMMs sustain a
//     smaller share of the tensor peak than streams do of the bandwidth
//     peak. Against the memory controller (no DRAM activity) the tensor
//     pipes must be saturated and read higher. Memory wins an exact tie
//     (rare with real readings; the rule must only be deterministic)
//     because HBM bandwidth is the harder limit: it is fixed by the part,
//     while tensor throughput still grows with lower precision and better
//     kernels, and it is the limit LLM serving meets most, in decode.
//
//  8. compute_bound when TensorActivity ≥ ComputeTensor.
//
//  9. compute_bound when SMActivity ≥ ComputeSM (without GPM: Utilization ≥
//     ComputeSM) and memory was measured (it was below its bound, or rule 7
//     would have held). SM activity alone cannot say what the SMs were
//     doing: a memory-bound kernel keeps its warps resident while they wait
//     on HBM, so high SM activity with memory unmeasured is unknown, not
//     compute_bound. With memory measured and unsaturated, busy SMs mean
//     the time went on-chip: non-tensor math (FP32, SFU), shared memory,
//     instruction issue. That is compute in the broad sense, and without
//     GPM it is the best a kernel-time share can say.
//
//  10. compute_bound or memory_bound, for a busy GPU on which nothing
//     reached its bound, when GPM measured both tensor and DRAM activity:
//     the unit nearer what it reaches as the limit (as in rule 7; memory
//     wins a tie), provided one of them is at least half-way to its bound
//     (TensorActivity / ComputeTensor or DRAMActivity / MemoryDRAM). A batched LLM step interleaves
//     bandwidth-bound kernels (attention over the KV cache, the weights of
//     small batches) with tensor-bound ones (the GEMMs of a prefill chunk),
//     so over a step, let alone a 100 ms bin, neither unit reads saturated
//     though one of them sets the pace. Nsight Compute's speed-of-light
//     analysis names the limiter the same way: the unit with the highest
//     share of its peak (here, of its attainable peak). Under half-way (by default a quarter of peak) the
//     time went elsewhere and rule 11 says so.
//
//  11. unknown otherwise. This is a busy GPU (activity at or above the idle
//     bound) on which nothing measured reached, or came half-way to, its
//     bound: typically latency-bound kernels, short gaps between launches,
//     synchronisation, or a GPU without GPM. Calling it compute_bound would
//     credit the SMs with time they spent waiting, and host_bound would
//     claim starvation the GPU's busy share contradicts; the label set has
//     no "latency bound", so the classifier says it cannot tell.

// Comparisons are "at or above" for every bound a label needs to reach,
// and "strictly below" for the idle bounds: a GPU exactly at
// IdleUtilization or BusySMActivity counts as working.
//
// # Default thresholds
//
// [DefaultThresholds] returns these; each is a share in (0, 1]. Where a
// default cites workload figures, they are the ones the receiver's
// simulated LLM workload (internal/nvmlsim) models for prefill and decode,
// the reference the defaults are checked against in the tests; real
// workloads vary, and each bound leaves a margin on both sides.
//
//   - IdleUtilization 0.3: kernels ran less than 30% of the interval, so
//     the GPU waited at least 70% of it. Utilization is an upper bound on
//     work, so below it the GPU certainly was mostly not working.
//   - BusySMActivity 0.3: a GPU that is itself the limit keeps most SMs
//     occupied. Compute-bound kernels fill every SM; bandwidth-bound ones
//     need many too, because saturating HBM takes megabytes of loads in
//     flight (Little's law: 3-5 TB/s × ~0.5-1 µs of DRAM latency), more
//     than a few SMs can keep outstanding. Below 0.3 more than two thirds
//     of SM time was unused and the GPU was not what limited the work
//     (DCGM's guidance calls SM activity below 0.5 likely ineffective use).
//     It sits well below decode (0.45-0.65), so decode with some launch
//     gaps does not read as idle.
//   - ComputeTensor 0.5: tensor pipes issuing half of all cycles make
//     matrix math the largest consumer of time. Prefill reads 0.6-0.8,
//     decode's skinny GEMMs 0.12-0.25 since they wait on HBM.
//   - ComputeSM 0.8: DCGM's guidance is that SM activity of 0.8 or more is
//     necessary for effective use of the GPU; at that level, with memory
//     measured and not saturated, the SMs are the limit. Without GPM the
//     same bound applies to Utilization, the only activity signal left.
//   - MemoryDRAM 0.5: bandwidth-bound kernels reach 70-90% of peak HBM
//     bandwidth (about 80% is the practical ceiling), and an interval's
//     average also holds the short kernels between them; compute-bound
//     GEMMs reuse tiles from shared memory and L2. Decode reads 0.59-0.9,
//     prefill 0.25-0.4: half of peak separates them.
//   - MemoryControllerBusy 0.6: higher than MemoryDRAM because the memory
//     controller counts time with any traffic rather than bandwidth, so
//     the same work reads higher. Decode reads 0.65-0.9, prefill 0.25-0.4.
//   - InterconnectFraction 0.7: protocol overhead (PCIe TLP headers and
//     flow control, NVLink packet headers) caps payload at roughly 80-90%
//     of the raw link rate, so 70% of raw is already ~80% of what the link
//     can carry: near capacity. Inference traffic outside KV swapping and
//     all-reduce stays far below: prompts and tokens are MB/s, and the
//     modelled tensor-parallel all-reduce takes under 15% of NVLink.
//   - MemoryCapacityFraction 0.97: inference engines preallocate their KV
//     cache (vLLM's gpu_memory_utilization defaults to 0.9 and is often
//     raised to 0.95; TensorRT-LLM takes 0.9 of the memory left after the
//     weights; SGLang's mem_fraction_static is of the same order), so a
//     healthy server sits at 0.9-0.96 of memory used all the time, and a
//     lower bound would bury every other label under memory_capacity. At
//     0.97 only 2.4 GB of an 80 GB GPU is left, less than one large
//     prefill's activations. NVML cannot see inside a preallocated pool:
//     for such engines KV-cache pressure shows in the engine's own
//     preemption metrics; this label catches memory full for the device
//     (engines that grow their cache on demand, fragmentation, co-located
//     processes). Set it above the engine's own fraction where that is
//     higher.
//   - ThrottledShare 0.5: a label describes the interval, so a throttle
//     must hold for most of it to be the interval's explanation. On short
//     intervals throttle shares are near 0 or 1 and any bound works; on
//     long ones this is a majority rule, like [Dominant].
//   - TensorAtLimit 0.7 and DRAMAtLimit 0.85: what each unit reads while it
//     alone sets the pace, the attainable peaks of an empirical roofline.
//     Large BF16 and FP8 GEMMs on Hopper sustain about 70% of the tensor
//     cores' dense peak (cuBLAS reaches some 650-750 of the H100's 989
//     TFLOPS), while bandwidth-bound kernels (decode attention, streaming
//     the weights) sustain 80-90% of peak HBM bandwidth. Compared raw, a
//     step whose math takes up to a fifth longer than its memory traffic
//     would read memory_bound. Lower TensorAtLimit where kernels reach less
//     of the peak (small batches, unfused attention).
//   - PowerSwing 0.4 (rule 0; a share in [0, 1], 0 turns rule 0 off): the
//     power between a GPU at its tensor limit and one
//     at its DRAM limit, as a share of its power limit. An H200 drew 691 W
//     in back-to-back bf16 GEMMs, held at its 700 W cap, and 413 W in a
//     streaming device-to-device copy (docs/hardware.md): 278 W, 0.40 of
//     the limit. The swing scales with the board (a 400 W A100 swings
//     less than a 700 W H100), so it is a share of the limit, not watts;
//     a board that swings less than its share reads its power shifts as
//     smaller moves than they were, which errs towards the tick's label.
//
// # Intervals
//
// The classifier trusts that the inputs describe one interval. The longer
// the interval, the more phases it mixes: an interval that was half
// prefill and half idle gap reads as neither. Classify short intervals
// (the receiver's driver samples arrive ~6 times a second; GPM between
// scrapes) and aggregate with [Dominant]. RequestsInFlight should count
// only requests running during the interval, or idle gaps between
// requests read as host_bound.
//
// # Dominant and ties
//
// [Dominant] returns the label with the most time. Ties go to the label
// earlier in [Labels], whose order ranks labels by how much they explain
// about slowness and how actionable they are:
//
//	thermal_throttled, power_throttled, memory_capacity, interconnect_bound,
//	memory_bound, compute_bound, host_bound, idle, unknown
//
// Throttles first: a throttle explains slowness better than the workload's
// shape ("compute bound" is what prefill is supposed to be), and thermal
// before power as in rules 3-4. Then the system limits (capacity, links),
// which constrain whatever the kernels do. Then the kernels' own limits,
// memory before compute as in rule 7's tie. Then the absence of work:
// host_bound (work existed, the GPU was starved) says more than idle. Any
// label says more than unknown, so unknown wins only alone. This order
// differs from Classify's on purpose: within one interval idleness makes a
// throttle moot (rule 2 comes first), but between intervals of equal time
// the interval in which the GPU worked throttled says more.
package bottleneck // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
