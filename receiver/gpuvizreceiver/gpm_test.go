package gpuvizreceiver

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// GPM computes rates between samples at least gpmMinInterval apart: that
// far apart exactly is enough.
func TestGPMIntervalOfExactlyTheMinimumIsMeasured(t *testing.T) {
	lib := fixtureServer(1)
	st := newGPMState(lib)
	require.NotNil(t, st)
	take := func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req, ret := st.measure(lib, at, take)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Nil(t, req, "the first sample opens the interval")
	req, ret = st.measure(lib, at.Add(gpmMinInterval), take)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.NotNil(t, req)
}

// A sample that fails ends the interval: the next one opens a new one
// rather than measure across the failure (a gap while another client held
// the counters, or a reset).
func TestGPMFailedSampleStartsANewInterval(t *testing.T) {
	lib := fixtureServer(1)
	st := newGPMState(lib)
	require.NotNil(t, st)
	ret := nvml.SUCCESS
	take := func(nvml.GpmSample) nvml.Return { return ret }
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, _ = st.measure(lib, at, take)
	ret = nvml.ERROR_IN_USE
	_, got := st.measure(lib, at.Add(time.Second), take)
	require.Equal(t, nvml.ERROR_IN_USE, got)
	ret = nvml.SUCCESS
	req, got := st.measure(lib, at.Add(time.Minute), take)
	require.Equal(t, nvml.SUCCESS, got)
	assert.Nil(t, req, "no rate over the minute the counters were held")
	req, _ = st.measure(lib, at.Add(time.Minute+time.Second), take)
	assert.NotNil(t, req)
}
