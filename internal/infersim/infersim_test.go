package infersim

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// h200 is the simulated H200's hardware (nvmlsim.Model.Hardware; nvmlsim
// imports this package, so the figures are repeated here).
var h200 = Hardware{
	Name: "h200", MemoryBytes: 143771 * (1 << 20), PeakFLOPS: 989e12, HBMBytesPerSecond: 4.8e12, NVLinkBytesPerSecond: 450e9,
	PowerLimitW: 700, IdleW: 75, SMClockMaxMHz: 1980, SMClockIdleMHz: 345,
}

// episode is an arbitrary episode of the tests: 2026-12-01 09:00 UTC.
var episode = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).UnixNano() / int64(10*time.Minute)

func mustScenario(t *testing.T, name string, gpus int) Scenario {
	t.Helper()
	sc, err := LookupScenario(name, gpus, h200)
	require.NoError(t, err)
	return sc
}

// shortScenario is the scenario with 3-minute episodes and at most a
// minute's drain, to keep the race detector's run short.
func shortScenario(t *testing.T, name string, gpus int) Scenario {
	sc := mustScenario(t, name, gpus)
	sc.Episode, sc.Drain = 3*time.Minute, min(sc.Drain, time.Minute)
	return sc
}

func TestLookupScenarioLaysEnginesOut(t *testing.T) {
	mixed := mustScenario(t, "mixed", 8)
	var groups [][]int
	for _, e := range mixed.Engines {
		groups = append(groups, e.GPUs)
		assert.Equal(t, MatchAttribute, e.Match, "several engines share the node")
	}
	assert.Equal(t, [][]int{{0, 1, 2, 3}, {4, 5}, {6}, {7}}, groups)
	assert.Equal(t, []string{FamilyVLLM, FamilySGLang, FamilyTGI, FamilyTRTLLM},
		[]string{mixed.Engines[0].Family, mixed.Engines[1].Family, mixed.Engines[2].Family, mixed.Engines[3].Family})

	steady := mustScenario(t, "steady", 8)
	require.Len(t, steady.Engines, 1)
	assert.Equal(t, MatchHost, steady.Engines[0].Match, "one engine owns the node")
	assert.Len(t, steady.Engines[0].GPUs, 8)

	hs := mustScenario(t, "host_starved", 3)
	assert.Len(t, hs.Engines, 3, "one engine per GPU")

	assert.Equal(t, 420.0, mustScenario(t, "power_capped", 8).PowerLimitW)

	_, err := LookupScenario("steady", 1, h200)
	assert.ErrorContains(t, err, "llama-3.1-70b does not fit on 1 h200 GPU(s)")
	_, err = LookupScenario("nope", 8, h200)
	assert.ErrorContains(t, err, `unknown scenario "nope"`)
}

// TestSchedulerInvariants checks every step of every scenario: the token
// budget, the sequence limit and the KV pool are never exceeded, and every
// request that arrived finishes or is aborted at the episode's end, with
// its timestamps in order.
func TestSchedulerInvariants(t *testing.T) {
	for _, name := range Scenarios() {
		t.Run(name, func(t *testing.T) {
			sc := shortScenario(t, name, 8)
			for ei, e := range sc.Engines[:min(len(sc.Engines), 2)] { // engines beyond repeat a shape
				steps := 0
				r := simulateChecked(h200, sc, ei, 3, episode, func(s *sim, batch []scheduled) {
					steps++
					tokens := 0
					for _, b := range batch {
						tokens += b.tokens
						if b.tokens <= 0 {
							t.Fatalf("a request scheduled for %d tokens", b.tokens)
						}
					}
					held := 0
					for _, q := range s.running {
						held += q.blocks
						if q.blocks*e.Scheduler.BlockSize < q.computed {
							t.Fatalf("a request's %d tokens overflow its %d blocks", q.computed, q.blocks)
						}
					}
					switch {
					case tokens > e.Scheduler.MaxBatchedTokens:
						t.Fatalf("%d tokens in a step over the budget of %d", tokens, e.Scheduler.MaxBatchedTokens)
					case len(s.running) > e.Scheduler.MaxNumSeqs:
						t.Fatalf("%d running over %d slots", len(s.running), e.Scheduler.MaxNumSeqs)
					case s.blocks < 0 || held+s.blocks != s.total:
						t.Fatalf("KV pool: %d free + %d held != %d", s.blocks, held, s.total)
					}
				})
				require.Positive(t, steps)
				arrivals := generate(e, 3, episode, ei, episode*int64(sc.Episode), (episode+1)*int64(sc.Episode)-int64(sc.Drain))
				require.Len(t, r.reqs, len(arrivals), "every request that arrived is accounted for")
				for _, q := range r.reqs {
					if q.Finish == FinishAbort {
						continue
					}
					assert.True(t, q.Arrival < q.Queued && q.Queued <= q.Scheduled && q.Scheduled < q.FirstToken &&
						q.FirstToken <= q.LastToken && q.LastToken == q.Finished, "timestamps in order: %+v", q)
					if q.Finish == FinishLength {
						assert.Equal(t, q.MaxTokens, q.OutputTokens)
					}
					assert.Positive(t, q.PrefillEnergy)
					assert.InDelta(t, q.Energy, q.PrefillEnergy+q.DecodeEnergy, 1e-9*q.Energy)
				}
			}
		})
	}
}

// TestEnergyOfAllStepsEqualsTheCounter: the requests' energies and the idle
// energy add up to the GPUs' energy, and the bins agree.
func TestEnergyOfAllStepsEqualsTheCounter(t *testing.T) {
	for _, name := range Scenarios() {
		t.Run(name, func(t *testing.T) {
			n := NewNode(h200, shortScenario(t, name, 8), 5)
			ep := n.Episode(episode)
			var requests, idle, bins, counter float64
			for _, r := range ep.Requests() {
				requests += r.Energy
			}
			for g := range 8 {
				counter += n.Integrate(g, ep.Start, ep.End).Joules
				for _, b := range n.Bins(g, ep.Start, ep.End) {
					idle += b.Idle
					bins += b.Energy
				}
			}
			assert.InDelta(t, counter, requests+idle, 1e-9*counter)
			assert.InDelta(t, counter, bins, 1e-9*counter)
		})
	}
}

func TestEpisodesAreDeterministic(t *testing.T) {
	sc := shortScenario(t, "mixed", 8)
	a, b := NewNode(h200, sc, 11), NewNode(h200, sc, 11)
	assert.Equal(t, a.Episode(episode).Requests(), b.Episode(episode).Requests())
	for g := range 8 {
		assert.Equal(t, a.Segments(a.Episode(episode), g), b.Segments(b.Episode(episode), g))
	}
	other := NewNode(h200, sc, 12).Episode(episode).Requests()
	assert.NotEqual(t, a.Episode(episode).Requests()[0].Arrival, other[0].Arrival, "another seed, other traffic")
	assert.NotEqual(t, a.Episode(episode).Requests()[0].Key, a.Episode(episode + 1).Requests()[0].Key, "episodes differ")
}

func TestRangesPartitionRequestsAndCoverTime(t *testing.T) {
	n := NewNode(h200, shortScenario(t, "steady", 8), 2)
	from := episode*int64(3*time.Minute) + int64(2*time.Minute)
	to := from + int64(2*time.Minute) // across an episode boundary
	whole := n.Finished(from, to)
	var parts []Request
	for t0 := from; t0 < to; t0 += int64(7 * time.Second) {
		parts = append(parts, n.Finished(t0, min(t0+int64(7*time.Second), to))...)
	}
	assert.Equal(t, whole, parts)
	bins := n.Bins(0, from, to)
	assert.Len(t, bins, int((to-from)/int64(BinWidth)))
	tot := n.Integrate(0, from, to)
	assert.InDelta(t, 120, tot.Seconds, 1e-9)
	var binJ float64
	for _, b := range bins {
		binJ += b.Energy
	}
	assert.InDelta(t, tot.Joules, binJ, 1e-6*tot.Joules)
}

// TestRooflineSaysWhichResourceLimits: a long prompt chunk is compute
// bound and a large decode batch with long contexts memory bound, because
// the numbers say so.
func TestRooflineSaysWhichResourceLimits(t *testing.T) {
	sc := mustScenario(t, "steady", 8)
	s := &sim{hw: h200, e: sc.Engines[0], tp: 8}
	prefill := s.cost([]scheduled{{r: &request{}, tokens: 2048}})
	assert.Greater(t, prefill.tc, prefill.tm)
	var decode []scheduled
	for range 64 {
		decode = append(decode, scheduled{r: &request{computed: 8000}, tokens: 1})
	}
	rl := s.cost(decode)
	assert.Greater(t, rl.tm, 5*rl.tc)
	_, tensor, dram, _ := rl.at(1)
	assert.Less(t, tensor, 0.2)
	assert.Greater(t, dram, 0.6)
	assert.Positive(t, rl.comm, "TP8 all-reduces")
	// Each request's cost share: the 64 decodes are alike.
	assert.InDelta(t, decode[0].cost, decode[63].cost, 1e-15)
}

func TestPowerCapHoldsClocksDownAndSlowsSteps(t *testing.T) {
	n := NewNode(h200, shortScenario(t, "power_capped", 8), 1)
	ep := n.Episode(episode)
	capped := 0
	for _, seg := range n.Segments(ep, 0) {
		assert.LessOrEqual(t, seg.PowerW, 420+1e-6, "the limit holds")
		if seg.PowerCapped {
			capped++
			assert.Less(t, seg.ClockMHz, h200.SMClockMaxMHz)
		}
	}
	assert.Positive(t, capped)
	labels := map[string]int{}
	for _, b := range n.Bins(0, ep.Start, ep.End) {
		labels[b.Label]++
	}
	assert.Greater(t, labels[LabelPowerThrottled], labels[LabelComputeBound], "prefill is throttled, not compute bound")

	steady := NewNode(h200, shortScenario(t, "steady", 8), 1)
	for _, seg := range steady.Segments(steady.Episode(episode), 0) {
		assert.False(t, seg.ThermalSlowdown)
	}
}

func TestThermalSlowdownOnAHotBoard(t *testing.T) {
	hot := h200
	hot.PowerLimitW, hot.IdleW = 1600, 200 // a board the heat sink cannot cool: 30 + 0.07 × ~1000 W > 87 °C
	sc, err := LookupScenario("power_capped", 8, hot)
	require.NoError(t, err)
	sc.PowerLimitW = 0
	n := NewNode(hot, sc, 1)
	ep := n.Episode(episode)
	var maxT float64
	slowed := 0
	for _, seg := range n.Segments(ep, 0) {
		maxT = max(maxT, float64(seg.TempC))
		if seg.ThermalSlowdown {
			slowed++
		}
	}
	assert.Greater(t, maxT, slowdownC)
	assert.Positive(t, slowed)
	first := n.Segments(ep, 0)[0].TempC
	assert.Less(t, float64(first), 50.0, "the thermal model starts cool and warms over minutes")
}

func TestLongContextPreempts(t *testing.T) {
	n := NewNode(h200, mustScenario(t, "long_context", 8), 1)
	preempted := 0
	for _, r := range n.Episode(episode).Requests() {
		if r.Preemptions > 0 && r.Finish != FinishAbort {
			preempted++
			assert.Less(t, r.Scheduled, r.FirstToken, "preemption does not move the first schedule")
		}
	}
	assert.Positive(t, preempted)
}

func TestHostStarvedGPUsWaitForTheHost(t *testing.T) {
	n := NewNode(h200, shortScenario(t, "host_starved", 8), 1)
	ep := n.Episode(episode)
	labels := map[string]int{}
	for _, b := range n.Bins(3, ep.Start, ep.End) {
		labels[b.Label]++
	}
	assert.Greater(t, labels[LabelHostBound], len(n.Bins(3, ep.Start, ep.End))/2)
	tot := n.Integrate(3, ep.Start, ep.End)
	assert.Less(t, tot.BusySeconds/tot.Seconds, 0.5, "the GPU runs kernels less than half the time")
}

func TestTensorParallelGroupsShareSteps(t *testing.T) {
	n := NewNode(h200, shortScenario(t, "tensor_parallel", 8), 1)
	ep := n.Episode(episode)
	assert.Equal(t, n.Segments(ep, 0), n.Segments(ep, 3))
	assert.NotEqual(t, n.Segments(ep, 0), n.Segments(ep, 4), "another engine")
	tot := n.Integrate(0, ep.Start, ep.End)
	assert.Positive(t, tot.NVLinkBytes)
	hs := NewNode(h200, shortScenario(t, "host_starved", 8), 1)
	assert.Zero(t, hs.Integrate(0, ep.Start, ep.End).NVLinkBytes, "no all-reduce on one GPU")
}

func TestTruthFileRoundTrips(t *testing.T) {
	n := NewNode(h200, shortScenario(t, "steady", 8), 1)
	ep := n.Episode(episode)
	var buf bytes.Buffer
	w, err := NewTruthWriter(&buf, TruthHeader{Scenario: "steady", Seed: 1, GPUModel: "h200", BinWidthNS: int64(BinWidth)})
	require.NoError(t, err)
	reqs := ep.Requests()[:5]
	for _, r := range reqs {
		require.NoError(t, w.Request(r))
	}
	bins := n.Bins(0, ep.Start, ep.Start+int64(time.Second))
	for _, b := range bins {
		require.NoError(t, w.Bin(b))
	}
	require.NoError(t, w.Flush())
	got, err := ReadTruth(&buf)
	require.NoError(t, err)
	assert.Equal(t, "steady", got.Header.Scenario)
	require.Len(t, got.Requests, 5)
	assert.Equal(t, reqs[2].ToTruth(), got.Requests[2])
	assert.Len(t, got.Bins, 10)

	_, err = ReadTruth(bytes.NewBufferString(`{"bin":{"gpu":0}}` + "\n"))
	assert.ErrorContains(t, err, "truth line 1: the header must come first")
	_, err = ReadTruth(bytes.NewBufferString("{}\n"))
	assert.ErrorContains(t, err, "truth line 1: the header must come first")
	_, err = ReadTruth(bytes.NewBufferString(""))
	assert.ErrorContains(t, err, "no header")
}

func TestIdsComeFromTheKey(t *testing.T) {
	a, b := Request{Key: 1}, Request{Key: 2}
	assert.NotEqual(t, a.TraceID(), b.TraceID())
	assert.Equal(t, a.TraceID(), Request{Key: 1}.TraceID())
	assert.NotZero(t, a.SpanID())
}

func TestTruthOfAWindow(t *testing.T) {
	n := NewNode(h200, shortScenario(t, "mixed", 8), 1)
	ep := n.Episode(episode)
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	tr := n.Truth(n.Header(1, ids, "node-1"), ep.Start, ep.End)
	assert.Equal(t, "mixed", tr.Header.Scenario)
	assert.Equal(t, "h200", tr.Header.GPUModel)
	require.Len(t, tr.Header.Engines, 4)
	assert.Equal(t, []int{4, 5}, tr.Header.Engines[1].GPUs)
	assert.Equal(t, MatchAttribute, tr.Header.Engines[1].Match)
	assert.Len(t, tr.Requests, len(ep.Requests()))
	assert.Len(t, tr.Bins, 8*int((ep.End-ep.Start)/int64(BinWidth)))
}

// TestStepsOfARequestAreRecorded: a request's chunks add up to its prompt
// (and its recomputations), and its other steps decoded one token each.
func TestStepsOfARequestAreRecorded(t *testing.T) {
	n := NewNode(h200, mustScenario(t, "long_context", 8), 1)
	checked, preempted := 0, 0
	for _, r := range n.Episode(episode).Requests() {
		if r.Finish == FinishAbort {
			continue
		}
		checked++
		assert.Len(t, r.Preempted, r.Preemptions)
		tokens := 0
		for _, c := range r.Chunks {
			tokens += c.Tokens
			assert.True(t, c.Start < c.End && c.Start >= r.Scheduled && c.End <= r.Finished)
		}
		if r.Preemptions == 0 {
			assert.Equal(t, r.PromptTokens, tokens, "the prompt, in chunks")
			assert.Equal(t, r.Steps-len(r.Chunks), r.OutputTokens-1, "one decode step per output token after the first")
			assert.Equal(t, r.FirstToken, r.Chunks[len(r.Chunks)-1].End, "the last chunk produced the first token")
		} else {
			preempted++
			assert.Greater(t, tokens, r.PromptTokens, "a preemption recomputes what was dropped")
			for _, at := range r.Preempted {
				assert.True(t, at > r.Scheduled && at < r.Finished)
			}
		}
	}
	assert.Positive(t, checked)
	assert.Positive(t, preempted)
}

// TestAStepEndingAtTheEpisodesEndStaysInIt: a step that would end exactly
// at the episode's end is not run (its requests are aborted in the
// episode's last nanosecond), so every request's Finished lies inside its
// episode and consecutive ranges of Node.Finished return it once. The
// episode is cut to end where a request of a longer one finished: arrivals
// stop at the same moment, so the engine runs the same steps up to it.
func TestAStepEndingAtTheEpisodesEndStaysInIt(t *testing.T) {
	sc := mustScenario(t, "host_starved", 1)
	sc.Episode, sc.Drain = 3*time.Minute, time.Minute
	until := sc.Episode - sc.Drain
	var end int64
	for _, q := range simulate(h200, sc, 0, 1, 0).reqs {
		if q.Finish != FinishAbort && q.Finished > int64(until) {
			end = q.Finished
			break
		}
	}
	require.NotZero(t, end, "a request finishes in the drain")
	sc.Episode = time.Duration(end)
	sc.Drain = sc.Episode - until
	n := NewNode(h200, sc, 1)
	ep := n.Episode(0)
	require.NotEmpty(t, ep.Requests())
	for _, q := range ep.Requests() {
		require.Less(t, q.Finished, ep.End, "Finished inside the episode: %+v", q)
	}
	all := len(ep.Requests()) + len(n.Episode(1).Requests())
	assert.Len(t, append(n.Finished(0, ep.End), n.Finished(ep.End, 2*ep.End)...), all, "every request once")
}

// TestEveryArrivalIsAccountedForWithoutADrain: with no drain, arrivals go
// on to the episode's end, so some are queued while the step that runs
// into the end is skipped. Each request queued inside the episode is
// still in it, aborted in its last nanosecond if it did not finish; one
// whose tokenisation would end past the episode is not part of it.
func TestEveryArrivalIsAccountedForWithoutADrain(t *testing.T) {
	sc := mustScenario(t, "host_starved", 1)
	sc.Episode, sc.Drain = time.Minute, 0
	start, end := episode*int64(sc.Episode), (episode+1)*int64(sc.Episode)
	lateQueued := 0
	for seed := uint64(1); seed <= 30; seed++ {
		r := simulate(h200, sc, 0, seed, episode)
		want := 0
		for _, a := range generate(sc.Engines[0], seed, episode, 0, start, end) {
			if a.Queued < end {
				want++
			}
		}
		require.Equal(t, want, len(r.reqs), "seed %d: every request queued in the episode is accounted for", seed)
		last := r.segs[len(r.segs)-1]
		for _, q := range r.reqs {
			require.True(t, q.Arrival < q.Queued && q.Queued <= q.Finished && q.Finished < end, "seed %d: %+v", seed, q)
			if q.Queued > last.Start {
				lateQueued++
				assert.Equal(t, FinishAbort, q.Finish)
				assert.Equal(t, end-1, q.Finished)
			}
		}
	}
	assert.Positive(t, lateQueued, "some request is queued while the engine's last step would run past the end")
}
