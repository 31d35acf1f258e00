package nvmlsim

import (
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustModel(t *testing.T, name string) Model {
	t.Helper()
	m, err := LookupModel(name)
	require.NoError(t, err)
	return m
}

// requestsStart is an arbitrary moment, deliberately not on a window edge.
var requestsStart = time.Date(2026, 11, 30, 12, 0, 7, 0, time.UTC).UnixNano()

func TestRequestsLieOnTheirSegments(t *testing.T) {
	for _, model := range Models() {
		m := mustModel(t, model)
		for gpu := range 3 {
			s := NewSchedule(m, 5, gpu)
			check := NewSchedule(m, 5, gpu) // a second schedule, so At does not disturb s's cache
			from, to := requestsStart, requestsStart+int64(5*time.Minute)
			reqs := s.Requests(from, to)
			require.NotEmpty(t, reqs)
			prefillRate, decodeRate := TokenRates(m)
			for i, r := range reqs {
				assert.Equal(t, gpu, r.GPU)
				assert.GreaterOrEqual(t, r.End, from)
				assert.Less(t, r.End, to)
				if i > 0 {
					assert.Greater(t, r.End, reqs[i-1].End, "in order of End")
				}
				p := check.At(r.PrefillStart)
				assert.Equal(t, PhasePrefill, p.Phase)
				assert.Equal(t, r.PrefillStart, p.Start, "prefill starts on its segment")
				assert.Equal(t, r.DecodeStart, p.End, "prefill ends on its segment")
				d := check.At(r.DecodeStart)
				assert.Equal(t, PhaseDecode, d.Phase)
				assert.Equal(t, r.DecodeStart, d.Start)
				assert.Equal(t, r.End, d.End, "decode ends on its segment")
				// Queued inside the idle gap before the prefill, up to 40% of it.
				gap := check.At(r.PrefillStart - 1)
				assert.Equal(t, PhaseIdle, gap.Phase)
				queue := r.PrefillStart - r.Arrival
				assert.GreaterOrEqual(t, queue, int64(0))
				assert.LessOrEqual(t, float64(queue), maxQueueShare*float64(gap.End-gap.Start))
				assert.GreaterOrEqual(t, r.Arrival, gap.Start)
				// Tokens from the phase lengths.
				assert.InDelta(t, float64(r.DecodeStart-r.PrefillStart)/1e9*prefillRate, float64(r.PromptTokens), 0.5001)
				assert.InDelta(t, float64(r.End-r.DecodeStart)/1e9*decodeRate, float64(r.OutputTokens), 0.5001)
				assert.Positive(t, r.PromptTokens)
				assert.Positive(t, r.OutputTokens)
			}
		}
	}
}

func TestEveryDecodeSegmentIsOneRequest(t *testing.T) {
	m := mustModel(t, "h200")
	s := NewSchedule(m, 9, 4)
	w := windowOf(requestsStart)
	var decodes []Segment
	for i := w; i < w+3; i++ {
		for _, seg := range NewSchedule(m, 9, 4).Segments(i) {
			if seg.Phase == PhaseDecode {
				decodes = append(decodes, seg)
			}
		}
	}
	reqs := s.Requests(w*int64(Window), (w+3)*int64(Window))
	require.Len(t, reqs, len(decodes))
	for i, d := range decodes {
		assert.Equal(t, d.Start, reqs[i].DecodeStart)
		assert.Equal(t, d.End, reqs[i].End)
	}
}

func TestRequestsAreDeterministic(t *testing.T) {
	m := mustModel(t, "h100")
	from, to := requestsStart, requestsStart+int64(3*time.Minute)
	a := NewSchedule(m, 3, 2).Requests(from, to)
	b := NewSchedule(m, 3, 2).Requests(from, to)
	require.NotEmpty(t, a)
	assert.Equal(t, a, b)
	// Asked again from a warm cache, in pieces, the answer is the same.
	s := NewSchedule(m, 3, 2)
	s.Requests(from-int64(time.Hour), from)
	assert.Equal(t, a, s.Requests(from, to))

	ids := map[uint64]bool{}
	for _, r := range a {
		assert.False(t, ids[r.ID], "IDs are unique")
		ids[r.ID] = true
	}
	other := NewSchedule(m, 4, 2).Requests(from, to)
	assert.NotEqual(t, a, other, "another seed, another workload")
}

func TestAdjacentRangesNeitherLoseNorDuplicate(t *testing.T) {
	m := mustModel(t, "b200")
	from, to := requestsStart, requestsStart+int64(4*time.Minute)
	want := NewSchedule(m, 1, 7).Requests(from, to)
	require.NotEmpty(t, want)
	for _, step := range []time.Duration{200 * time.Millisecond, 997 * time.Millisecond, 7 * time.Second, Window} {
		s := NewSchedule(m, 1, 7)
		var got []Request
		for t0 := from; t0 < to; t0 += int64(step) {
			got = append(got, s.Requests(t0, min(t0+int64(step), to))...)
		}
		assert.Equal(t, want, got, "step %v", step)
	}
	// Ranges cut exactly at request ends and window edges.
	s := NewSchedule(m, 1, 7)
	cut := []int64{from, want[0].End, want[0].End + 1, windowOf(from)*int64(Window) + int64(Window), want[len(want)-1].End, to}
	var got []Request
	for i := 1; i < len(cut); i++ {
		got = append(got, s.Requests(cut[i-1], cut[i])...)
	}
	assert.Equal(t, want, got)
	assert.Empty(t, s.Requests(to, to))
	assert.Empty(t, s.Requests(to, from))
}

func TestRequestEndingOnAWindowEdge(t *testing.T) {
	// Build a schedule whose cache holds a window with a request ending
	// exactly on the window's end: it belongs to the range starting there.
	m := mustModel(t, "h200")
	s := NewSchedule(m, 1, 0)
	w := int64(10)
	edge := (w + 1) * int64(Window)
	segs := []Segment{
		{Start: w * int64(Window), End: edge - 3e9, Phase: PhaseIdle},
		{Start: edge - 3e9, End: edge - 2e9, Phase: PhasePrefill},
		{Start: edge - 2e9, End: edge, Phase: PhaseDecode},
		{Start: edge, End: edge, Phase: PhaseIdle},
	}
	s.cache[0] = cachedWindow{index: w, valid: true, segments: segs}
	s.cache[1] = cachedWindow{index: w + 1, valid: true, segments: []Segment{{Start: edge, End: edge + int64(Window), Phase: PhaseIdle}}}
	s.next = 2
	assert.Empty(t, s.Requests(edge-int64(time.Second), edge))
	got := s.Requests(edge, edge+int64(time.Second))
	require.Len(t, got, 1)
	assert.Equal(t, edge, got[0].End)
	assert.Equal(t, edge-3e9, got[0].PrefillStart)
}

func TestSimulatedIdentitiesMatchTheServer(t *testing.T) {
	s, err := New("h200", 4, 11, func() time.Time { return time.Unix(0, requestsStart) })
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, s.Init())
	for i := range 4 {
		d, ret := s.DeviceGetHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		uuid, _ := d.GetUUID()
		assert.Equal(t, uuid, SimulatedUUID("H200", 11, i))
		procs, ret := d.GetComputeRunningProcesses()
		require.Equal(t, nvml.SUCCESS, ret)
		require.Len(t, procs, 1)
		assert.Equal(t, procs[0].Pid, SimulatedPID(i))
	}
	assert.True(t, strings.HasPrefix(SimulatedUUID("x100", 1, 0), "GPU-simulated-x100-"))
}

func TestScheduleOfTheServerIsNewSchedule(t *testing.T) {
	// The load generator rebuilds each GPU's schedule with NewSchedule: it
	// must be the one the simulated device follows.
	s, err := New("a100", 2, 42, func() time.Time { return time.Unix(0, requestsStart) })
	require.NoError(t, err)
	from, to := requestsStart, requestsStart+int64(2*time.Minute)
	for i := range 2 {
		assert.Equal(t, NewSchedule(mustModel(t, "a100"), 42, i).Requests(from, to), s.Device(i).Schedule().Requests(from, to))
	}
}
