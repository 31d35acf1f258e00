package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

import "time"

// Activity is what a GPU's profiling counters (GPM) say it did over one
// bin: the seconds its tensor pipes and its DRAM were busy (activity ×
// the bin's width). Known is false without them (before Hopper, or
// dcgm-exporter without profiling fields). Spread is how far the readings
// behind it reach: the longest interval one of them describes (the
// sampling clock's tick, a scrape's interval); 0 when not known, taken as
// the receiver's default tick.
type Activity struct {
	TensorSeconds, DRAMSeconds float64
	Spread                     time.Duration
	Known                      bool
}

// loadModel predicts a bin's final weight from its GPUs' activity: the
// weight of every request that ran in it, including those whose spans
// have not arrived. The cost estimate counts tokens (cost.go): a token's
// math shows as tensor activity, its weights share and context reads as
// DRAM activity, so the final weight is close to linear in the two. It is
// a least-squares fit through the origin over the group's final bins,
// decayed so that it follows the workload (docs/attribution.md). The
// same fit of a bin's final cost in its steps predicts that (finalCost).
type loadModel struct {
	fit activityFit
	// ct and cd are the fit's coefficients, refitted as each bin is
	// learned (a group learns a bin per resolution; releases read many).
	ct, cd float64
}

// activityFit is the decayed sums of a least-squares fit through the
// origin of a bin's value on its tensor and DRAM activity.
type activityFit struct {
	tt, td, dd, tv, dv float64 // decayed sums of products of tensor, DRAM and the value
	n                  float64 // bins learned, decayed
}

// loadDecay is each learned bin's fading: a half-life of about 1,400
// busy bins, 2.3 minutes at 100 ms, long enough to smooth the mix of
// prefill and decode, short enough to follow a change of load.
const loadDecay = 0.9995

// minLoadBins is how many bins a fit needs before it is used.
const minLoadBins = 100

// add learns a bin's activity and value; solve returns the joint fit's
// coefficients, ok false while they are undetermined.
func (f *activityFit) add(a groupActivity, v float64) {
	t, d := float64(a.tensor), float64(a.dram)
	f.tt = f.tt*loadDecay + t*t
	f.td = f.td*loadDecay + t*d
	f.dd = f.dd*loadDecay + d*d
	f.tv = f.tv*loadDecay + t*v
	f.dv = f.dv*loadDecay + d*v
	f.n = f.n*loadDecay + 1
}

func (f *activityFit) solve() (ct, cd float64, ok bool) {
	det := f.tt*f.dd - f.td*f.td
	if det <= 0 {
		return 0, 0, false
	}
	return (f.tv*f.dd - f.dv*f.td) / det, (f.dv*f.tt - f.tv*f.td) / det, true
}

// learn adds a final bin, its activity and the weight admitted to it, and
// refits. Coefficients are kept non-negative: where the joint fit gives
// one below zero, the other signal alone is fit.
func (m *loadModel) learn(a groupActivity, weight float64) {
	f := &m.fit
	f.add(a, weight)
	if ct, cd, ok := f.solve(); ok && ct >= 0 && cd >= 0 {
		m.ct, m.cd = ct, cd
		return
	}
	// One signal alone: the one whose fit explains more of the weight.
	m.ct, m.cd = 0, 0
	if f.tt > 0 {
		m.ct = max(0, f.tv/f.tt)
	}
	if f.dd > 0 {
		m.cd = max(0, f.dv/f.dd)
	}
	if m.ct*f.tv >= m.cd*f.dv {
		m.cd = 0
	} else {
		m.ct = 0
	}
}

// learned reports whether the model has learned enough bins to predict.
func (m *loadModel) learned() bool { return m.fit.n >= minLoadBins }

// predict returns the final weight the model expects of a bin with
// activity a; ok is false until it has learned enough, or when the fit
// says nothing (no activity seen).
func (m *loadModel) predict(a groupActivity) (float64, bool) {
	if !m.learned() || (m.ct == 0 && m.cd == 0) {
		return 0, false
	}
	return m.ct*float64(a.tensor) + m.cd*float64(a.dram), true
}

// forecastScore compares a group's forecasts of its bins' final weight,
// as the first release that read each bin made them, with the weight each
// bin had at ScoreAge, the longest a span may wait: what waiting could
// have brought in. A forecast counts the part of the final weight the
// arrival curve says had arrived by then (reach), so requests that outlast
// ScoreAge do not make a forecast read as too high. Decayed sums, as the
// fits keep theirs.
type forecastScore struct {
	forecast, final float64
	n               float64 // bins scored, decayed
}

// forecastDecay is each scored bin's fading: a half-life of about 6,000
// bins, ten minutes at 100 ms. The score says how long a workload's
// requests run against the settle window, which changes slowly; a burst's
// passing shortfall should not make its spans wait.
const forecastDecay = 0.999885

// understatedBelow is how little of the final weight the forecasts may
// have taken before they count as understated: a twentieth less, about
// what the median request's energy may be off (docs/attribution.md).
const understatedBelow = 0.95

// add scores a bin's forecast of its final weight, of which reach arrives
// by ScoreAge, against the weight it has then (arrived); a bin no release
// read, or one nobody ran in, is not scored.
func (s *forecastScore) add(forecast float32, reach, arrived float64) {
	if forecast <= 0 || arrived <= 0 {
		return
	}
	s.forecast = s.forecast*forecastDecay + float64(forecast)*reach
	s.final = s.final*forecastDecay + arrived
	s.n = s.n*forecastDecay + 1
}

// understated reports whether the forecasts have taken less than
// understatedBelow of the final weight, over as many bins as a fit needs.
func (s *forecastScore) understated() bool {
	return s.n >= minLoadBins && s.forecast < understatedBelow*s.final
}

// waitScore is how much of its busy bins a group's GPUs spent waiting for
// their host: each bin a request ran in adds the share of the group's GPUs
// that froze it idle or host_bound. Decayed as forecastScore is.
type waitScore struct {
	waited float64
	n      float64 // bins scored, decayed
}

// add scores a bin requests ran in, of which share of the GPUs waited.
func (s *waitScore) add(share float64) {
	s.waited = s.waited*forecastDecay + share
	s.n = s.n*forecastDecay + 1
}

// waiting reports whether the GPUs waited through most of their busy
// bins, over as many bins as a fit needs.
func (s *waitScore) waiting() bool {
	return s.n >= minLoadBins && s.waited > s.n/2
}

// chunkModel predicts the share of a bin's time its steps carried prompt
// chunks from its GPUs' activity, fitted through the origin over the
// group's final bins (their chunks all admitted). A chunked step is
// compute-bound and a decode-only step memory-bound, so at a given total
// the share rises with tensor activity and falls with DRAM activity: the
// fit is left free to give one a negative coefficient. Its prediction is
// a share, 0 to 1.
type chunkModel struct {
	fit    activityFit
	ct, cd float64
}

func (m *chunkModel) learn(a groupActivity, share float64) {
	m.fit.add(a, share)
	if ct, cd, ok := m.fit.solve(); ok {
		m.ct, m.cd = ct, cd
	}
}

func (m *chunkModel) predict(a groupActivity) (float64, bool) {
	if m.fit.n < minLoadBins {
		return 0, false
	}
	return min(1, max(0, m.ct*float64(a.tensor)+m.cd*float64(a.dram))), true
}

// groupActivity is a group bin's activity summed over its GPUs, how many
// of them measured it, and the farthest its readings reach, in bins on
// each side (gpuBin.reach).
type groupActivity struct {
	tensor, dram float32
	gpus         uint16
	reach        uint8
}
