// Package analysis holds streaming analysis operators that run per GPU on
// the samples passing through the processor: a z-score anomaly flag for
// each of three signals, and a load-pattern label derived from utilisation.
// It is pure Go with no I/O; a [Tracker] holds one GPU's state, and the
// caller keeps one Tracker per GPU and serialises access to it.
//
// # Signals
//
// Three signals are tracked independently, each with its own window:
//
//   - [Utilization]: GPU utilisation as a fraction in 0..1 (NVML/DCGM
//     "fraction of time a kernel was running").
//   - [MemoryUsed]: framebuffer memory used as a fraction of total, 0..1.
//   - [PCIe]: PCIe throughput in bytes per second (rx+tx or either; the
//     caller decides, as long as it is consistent).
//
// # Windows
//
// Each signal keeps a ring of (timestamp, value) points. When a point at
// time ts arrives, points older than ts-Window are dropped first (the
// window is the closed interval [ts-Window, ts], so at a 10 s scrape
// interval a 5 min window holds exactly 30 earlier points); if the ring
// still holds MaxPoints points, the oldest is dropped to make room. So
// the window is the last Window of time, or the last MaxPoints points,
// whichever is shorter. Windows advance only when a point of that signal
// arrives: a signal that stops reporting keeps its last window, and a
// GPU that disappears should have its Tracker dropped by the caller.
//
// Points must arrive in non-decreasing time order per signal. A point
// strictly older than the newest one seen for its signal is ignored, as
// is a NaN or infinite value; points with equal timestamps are all kept.
//
// # Statistics
//
// For the n points in a window the package reports the mean and the
// sample standard deviation s = sqrt(Σ(x-mean)² / (n-1)) (Bessel's
// correction: the window is a sample from which the baseline is
// estimated, and the z-score compares a new point against it).
//
// The sums are kept as running sums over the ring with exact removal:
// when a point leaves, its own contribution is subtracted. To keep this
// O(1) per observation without the classic precision problems, the
// implementation
//
//   - sums shifted values d = x-K and d² instead of x and x², with K a
//     value from the window close to its mean, so that Σd² - (Σd)²/n does
//     not cancel catastrophically for signals whose mean is large
//     compared with their spread (PCIe at 1e10 B/s with a spread of a few
//     kB/s would lose every digit with raw sums of squares);
//   - accumulates both sums with compensated (Kahan–Babuška–Neumaier)
//     summation, using Knuth's branch-free TwoSum to capture each
//     rounding error exactly, so adding and later subtracting the same
//     term leaves essentially no residue;
//   - rebuilds the sums from the ring, choosing a fresh K, every 8n
//     additions and removals (n the window size; a full window does two
//     per observation), and earlier — but not more often than every n/8
//     operations — when the window's mean has drifted more than 4
//     standard deviations away from K, as after a level shift: the
//     cancellation in Σd² - (Σd)²/n loses about log10(1+(mean-K)²/s²)
//     digits, and a step of 1e8 standard deviations would otherwise
//     lose them all. A rebuild costs O(n), so the cost stays O(1)
//     amortised per observation.
//
// Tests check that after 10 million observations the mean and standard
// deviation still agree with a direct high-precision computation over the
// ring to better than 1e-9 relative.
//
// Memory is bounded: each signal's ring grows by doubling up to MaxPoints
// entries of 16 bytes (96 KiB per GPU at the default 2048) and is reused
// after that, so Observe does not allocate in the steady state.
//
// # Anomalies
//
// A new point x is scored against the window as it stands before x is
// added (after old points have expired), so a spike does not dilute its
// own baseline: z = (x-mean)/s. It is anomalous when |z| >= ZThreshold.
// Nothing is scored (anomalous false, z 0) until the window holds at
// least MinPoints points.
//
// A flat baseline is not scored: when s <= 1e-9 × max(|mean|, 1), z is
// reported as 0 and the point is not anomalous, whatever its value. The
// z-score of any deviation from a constant series is infinite, and
// flagging every change of an idle GPU's 0% utilisation (or of a
// constant memory reservation) would only produce noise. The floor is
// relative for the PCIe signal, whose values are in the 1e9..1e11 range,
// and absolute (1e-9) for the fractions, far below the resolution of the
// underlying counters. Variance that is only rounding noise of the
// running sums is reported as exactly zero. Note that after a jump off a
// flat series the first point is not scored but the second one is scored
// against a window that now contains the first, and is usually flagged.
//
// A step change is flagged while the window still consists mostly of the
// old level; as points at the new level fill the window, the mean moves
// and the standard deviation grows, and once the window has moved past
// the step (Window of time or MaxPoints points later) the new level is
// the baseline and is no longer anomalous.
//
// # Load patterns
//
// [Tracker.Pattern] labels the GPU from the mean and coefficient of
// variation (CV = s/mean) of the utilisation window:
//
//   - unknown: fewer than MinPoints points in the window;
//   - low: mean < LowMean;
//   - stable_high: mean >= HighMean and CV <= StableCV;
//   - fluctuating: CV >= FluctuatingCV (and mean >= LowMean);
//   - medium: everything else.
//
// Rules are applied in that order. Exact ties fall into the band named by
// the "at/above" or "at/below" wording: a mean equal to LowMean is not low,
// a mean equal to HighMean is high, a CV equal to StableCV is stable and a
// CV equal to FluctuatingCV fluctuates. High but unsteady load (mean >=
// HighMean, StableCV < CV < FluctuatingCV) is medium.
//
// # Defaults and why
//
//   - Window 5m: long enough to hold a statistically useful number of
//     samples at common scrape intervals (300 at 1 s, 30 at 10 s) and to
//     span several request bursts of an inference server, short enough
//     that a new steady state (a deploy, a traffic shift) becomes the
//     baseline within minutes. At scrape intervals above 10 s the window
//     holds fewer than MinPoints points and nothing is reported; raise
//     Window or lower MinPoints there. At exactly 10 s it is borderline:
//     jitter can leave 29 points.
//   - MaxPoints 2048: covers the 5 min window at up to ~6.8 samples per
//     second (fine-grained DCGM profiling at 100 ms keeps the last ~3.4
//     min instead), while bounding memory to 96 KiB per GPU.
//   - MinPoints 30: the sample standard deviation is itself uncertain
//     (relative standard error about 1/sqrt(2(n-1)), 13% at n=30, 35% at
//     n=5); at 30 points a nominal 3σ limit is, one standard error
//     either way, really 2.6σ to 3.4σ, and with fewer it is wider still
//     and a CV is too noisy to label with. 30 is the usual rule of thumb
//     for a sample large enough to estimate a spread.
//   - ZThreshold 3: the Shewhart control-chart limit. For Gaussian noise
//     it flags about 0.27% of points (one in ~370, so roughly one every
//     6 min per signal at a 1 s scrape); for any distribution Chebyshev
//     bounds the false-positive rate by 1/9. 2σ (4.6%) would flag about
//     three points a minute per signal at 1 s; 4σ would miss spikes that
//     matter for latency. Real GPU signals are not Gaussian (utilisation
//     is bounded and often bimodal), so treat the flag as "unusual for
//     this GPU's last few minutes", not as a calibrated probability.
//   - LowMean 0.2: a GPU busy less than a fifth of the time is mostly
//     idle — sporadic requests or over-provisioning, a consolidation
//     candidate.
//   - HighMean 0.7: at or above 70% kernel-busy time an inference server
//     has little headroom left for bursts; queueing delay grows steeply
//     as utilisation approaches 1.
//   - StableCV 0.15: the spread is within ±15% of the mean (at a mean of
//     0.8, s <= 0.12), typical sample-to-sample jitter of continuous
//     batching under steady load.
//   - FluctuatingCV 0.5: for on/off load that is busy a fraction p of the
//     time, CV = sqrt((1-p)/p), so CV >= 0.5 means idle at least 20% of
//     the time in bursts — a GPU swinging between busy and idle rather
//     than jittering around a level. (CV <= 0.15 on the same model needs
//     p >= 0.978.)
package analysis // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
