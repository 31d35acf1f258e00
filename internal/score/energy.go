package score

import (
	"math"
	"slices"
)

// ErrorStats summarises an estimator's relative errors |est − true| / true
// over the requests scored.
type ErrorStats struct {
	Count     int     `json:"count"`      // requests with a relative error
	Missing   int     `json:"missing"`    // requests the estimator has no value for
	ZeroTruth int     `json:"zero_truth"` // requests whose true value is 0
	Median    float64 `json:"median"`
	P90       float64 `json:"p90"`
	Max       float64 `json:"max"`
	// Weighted is Σ|est − true| / Σ true over the requests with a relative
	// error: each request's error weighted by its true energy, the share of
	// their energy a bill split by the estimator puts in the wrong place
	// (counted where it went and where it was missed).
	Weighted float64 `json:"weighted"`
}

// EnergyErrors are an estimator's errors on whole requests and per phase,
// on the costliest tenth of the requests (the ones a bill or a slow,
// expensive request's investigation is about), and how much it takes by
// prompt length.
type EnergyErrors struct {
	Request ErrorStats `json:"request"`
	Prefill ErrorStats `json:"prefill"`
	Decode  ErrorStats `json:"decode"`
	// Costliest is Request over the tenth of the scored requests (rounded
	// up) with the most true energy, ties included.
	Costliest ErrorStats `json:"costliest"`
	// ByPrompt is what the estimator took of the true energy (Σ est / Σ
	// true) in each quartile of the scored requests by prompt tokens,
	// shortest first; 0 for a quartile with none. A slope says it prices
	// prompt tokens wrongly against generated ones.
	ByPrompt [4]float64 `json:"by_prompt_quartile"`
	// ByPromptRequests counts the requests each share is over: a share of
	// 0 over some requests is an estimator that gave them nothing, over
	// none a quartile without requests.
	ByPromptRequests [4]int `json:"by_prompt_quartile_requests"`
}

// estimate is an estimator's energy for one request, J: NaN where it has
// none.
type estimate struct{ total, prefill, decode float64 }

// gpuvizEstimates reads the energies off each enriched request's span.
func gpuvizEstimates(reqs []request) []estimate {
	est := make([]estimate, len(reqs))
	for i, r := range reqs {
		if !r.enriched {
			continue
		}
		attrs := r.span.Attributes()
		est[i] = estimate{number(attrs, attrEnergy), number(attrs, attrPrefillEnergy), number(attrs, attrDecodeEnergy)}
	}
	return est
}

// onEqualTerms leaves est a value only where gpuviz's estimate (ref) has
// one: a span without phase energies (TGI's) leaves its phases out of both
// scores, counted as missing in both.
func onEqualTerms(est, ref []estimate) []estimate {
	for i := range est {
		if math.IsNaN(ref[i].total) {
			est[i].total = math.NaN()
		}
		if math.IsNaN(ref[i].prefill) {
			est[i].prefill = math.NaN()
		}
		if math.IsNaN(ref[i].decode) {
			est[i].decode = math.NaN()
		}
	}
	return est
}

// energyErrors scores est (one per request) over the enriched requests.
func energyErrors(reqs []request, est []estimate) EnergyErrors {
	var total, prefill, decode, costliest errorSample
	scored := withEnergy(reqs)
	cut := costliestCut(reqs, scored)
	for i, r := range reqs {
		if !r.enriched {
			continue
		}
		total.add(est[i].total, r.truth.Energy)
		prefill.add(est[i].prefill, r.truth.PrefillEnergy)
		decode.add(est[i].decode, r.truth.DecodeEnergy)
		if r.truth.Energy >= cut {
			costliest.add(est[i].total, r.truth.Energy)
		}
	}
	shares, counts := byPrompt(reqs, est, scored)
	return EnergyErrors{Request: total.stats(), Prefill: prefill.stats(), Decode: decode.stats(), Costliest: costliest.stats(),
		ByPrompt: shares, ByPromptRequests: counts}
}

// withEnergy returns the indexes of the enriched requests with true
// energy: the truth's set, so the costliest tenth and the prompt quartiles
// are the same requests for every estimator.
func withEnergy(reqs []request) []int {
	var idx []int
	for i, r := range reqs {
		if r.enriched && r.truth.Energy > 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

// byPrompt is EnergyErrors.ByPrompt and ByPromptRequests over the requests
// scored (indexes into reqs), in quartiles by prompt tokens, ties in the
// order of reqs.
func byPrompt(reqs []request, est []estimate, scored []int) (shares [4]float64, counts [4]int) {
	idx := slices.Clone(scored)
	slices.SortStableFunc(idx, func(a, b int) int { return reqs[a].truth.PromptTokens - reqs[b].truth.PromptTokens })
	for q := range shares {
		var got, truth float64
		for _, i := range idx[len(idx)*q/4 : len(idx)*(q+1)/4] {
			if !math.IsNaN(est[i].total) {
				got += est[i].total
				truth += reqs[i].truth.Energy
				counts[q]++
			}
		}
		if truth > 0 {
			shares[q] = got / truth
		}
	}
	return shares, counts
}

// costliestCut is the least true energy among the costliest tenth (rounded
// up) of the requests scored (indexes into reqs); +Inf where there are
// none.
func costliestCut(reqs []request, scored []int) float64 {
	if len(scored) == 0 {
		return math.Inf(1)
	}
	energies := make([]float64, len(scored))
	for k, i := range scored {
		energies[k] = reqs[i].truth.Energy
	}
	slices.Sort(energies)
	return energies[len(energies)-(len(energies)+9)/10]
}

type errorSample struct {
	errs               []float64
	missing, zero      int
	absErrJ, truthSumJ float64
}

func (s *errorSample) add(est, truth float64) {
	switch {
	case math.IsNaN(est):
		s.missing++
	case truth == 0:
		s.zero++
	default:
		s.errs = append(s.errs, math.Abs(est-truth)/truth)
		s.absErrJ += math.Abs(est - truth)
		s.truthSumJ += truth
	}
}

func (s *errorSample) stats() ErrorStats {
	st := ErrorStats{Count: len(s.errs), Missing: s.missing, ZeroTruth: s.zero}
	if len(s.errs) == 0 {
		return st
	}
	slices.Sort(s.errs)
	st.Median, st.P90, st.Max = quantile(s.errs, 0.5), quantile(s.errs, 0.9), s.errs[len(s.errs)-1]
	st.Weighted = s.absErrJ / s.truthSumJ
	return st
}

// quantile of sorted values, interpolated linearly between the closest
// ranks. A quantile that falls on a rank is that value, and one between
// equal values is that value: an infinite error (an estimate of +Inf) is
// the ranks it holds, not NaN from Inf − Inf or 0 × Inf at its neighbours.
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	lo := int(pos)
	frac := pos - float64(lo)
	if lo+1 >= len(sorted) || frac == 0 || sorted[lo] == sorted[lo+1] {
		return sorted[lo]
	}
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}
