package score

// Conservation compares the energy gpuviz attributed with what the GPUs
// drew over W, the window the truth's bins cover.
type Conservation struct {
	WindowStart int64 `json:"window_start"` // Unix ns
	WindowEnd   int64 `json:"window_end"`
	// CounterJ is every GPU's energy over W; IdleJ the part drawn while no
	// request ran, which belongs to none.
	CounterJ float64 `json:"counter_j"`
	IdleJ    float64 `json:"idle_j"`
	// Requests are those fully inside W (arrival ≥ its start, finished ≤ its
	// end); TrueJ their true energy; AttributedJ the gpuviz.energy of every
	// enriched request span of their traces, extras included.
	Requests    int     `json:"requests"`
	TrueJ       float64 `json:"true_request_j"`
	AttributedJ float64 `json:"attributed_j"`
	Ratio       float64 `json:"ratio"` // AttributedJ / TrueJ
	// AbortedJ is the part of TrueJ drawn by aborted requests: they have no
	// span, so gpuviz gives their energy to the requests beside them.
	AbortedJ float64 `json:"aborted_j"`
	// Straddling requests overlap an edge of W; they are left out.
	Straddling int `json:"straddling"`
}

func conserve(reqs []request, tl *timeline) Conservation {
	c := Conservation{WindowStart: tl.from, WindowEnd: tl.to}
	for _, g := range tl.gpus {
		for _, b := range tl.byGPU[g] {
			c.CounterJ += b.Energy
			c.IdleJ += b.Idle
		}
	}
	for _, r := range reqs {
		t := r.truth
		switch {
		case t.Arrival >= tl.from && t.Finished <= tl.to:
			c.Requests++
			c.TrueJ += t.Energy
			c.AttributedJ += r.traceEnergy
			if r.aborted {
				c.AbortedJ += t.Energy
			}
		case t.Arrival < tl.to && t.Finished > tl.from:
			c.Straddling++
		}
	}
	if c.TrueJ > 0 {
		c.Ratio = c.AttributedJ / c.TrueJ
	}
	return c
}
