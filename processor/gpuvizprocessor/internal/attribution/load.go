package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

// Activity is what a GPU's profiling counters (GPM) say it did over one
// bin: the seconds its tensor pipes and its DRAM were busy (activity ×
// the bin's width). Known is false without them (before Hopper, or
// dcgm-exporter without profiling fields).
type Activity struct {
	TensorSeconds, DRAMSeconds float64
	Known                      bool
}

// loadModel predicts a bin's final weight from its GPUs' activity: the
// weight of every request that ran in it, including those whose spans
// have not arrived. The cost estimate counts tokens (cost.go): a token's
// math shows as tensor activity, its weights share and context reads as
// DRAM activity, so the final weight is close to linear in the two. It is
// a least-squares fit through the origin over the group's final bins,
// decayed so that it follows the workload (docs/attribution.md).
type loadModel struct {
	tt, td, dd, tw, dw float64 // decayed sums of products of tensor, DRAM and weight
	n                  float64 // bins learned, decayed
	// ct and cd are the fit's coefficients, refitted as each bin is
	// learned (a group learns a bin per resolution; releases read many).
	ct, cd float64
}

// loadDecay is each learned bin's fading: a half-life of about 1,400
// busy bins, 2.3 minutes at 100 ms, long enough to smooth the mix of
// prefill and decode, short enough to follow a change of load.
const loadDecay = 0.9995

// minLoadBins is how many bins the model needs before it is used.
const minLoadBins = 100

// learn adds a final bin, its activity and the weight admitted to it, and
// refits. Coefficients are kept non-negative: where the joint fit gives
// one below zero, the other signal alone is fit.
func (m *loadModel) learn(a groupActivity, weight float64) {
	t, d := float64(a.tensor), float64(a.dram)
	m.tt = m.tt*loadDecay + t*t
	m.td = m.td*loadDecay + t*d
	m.dd = m.dd*loadDecay + d*d
	m.tw = m.tw*loadDecay + t*weight
	m.dw = m.dw*loadDecay + d*weight
	m.n = m.n*loadDecay + 1
	if det := m.tt*m.dd - m.td*m.td; det > 0 {
		m.ct = (m.tw*m.dd - m.dw*m.td) / det
		m.cd = (m.dw*m.tt - m.tw*m.td) / det
		if m.ct >= 0 && m.cd >= 0 {
			return
		}
	}
	// One signal alone: the one whose fit explains more of the weight.
	m.ct, m.cd = 0, 0
	if m.tt > 0 {
		m.ct = max(0, m.tw/m.tt)
	}
	if m.dd > 0 {
		m.cd = max(0, m.dw/m.dd)
	}
	if m.ct*m.tw >= m.cd*m.dw {
		m.cd = 0
	} else {
		m.ct = 0
	}
}

// predict returns the final weight the model expects of a bin with
// activity a; ok is false until it has learned enough, or when the fit
// says nothing (no activity seen).
func (m *loadModel) predict(a groupActivity) (float64, bool) {
	if m.n < minLoadBins || (m.ct == 0 && m.cd == 0) {
		return 0, false
	}
	return m.ct*float64(a.tensor) + m.cd*float64(a.dram), true
}

// groupActivity is a group bin's activity summed over its GPUs, and how
// many of them measured it.
type groupActivity struct {
	tensor, dram float32
	gpus         uint16
}
