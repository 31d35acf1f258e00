package gpuvizreceiver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// The only GPU cannot be identified at start, so no GPU registers for Xid
// events then; it is found a minute later, and its Xid errors are counted
// from then on like those of a GPU read from the start.
func TestXidsOfAGPUFoundLaterAreCounted(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	var identified atomic.Bool
	dev.GetUUIDFunc = func() (string, nvml.Return) {
		if !identified.Load() {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return dev.UUID, nvml.SUCCESS
	}
	var delivered atomic.Bool
	lib.EventSetWaitFunc = func(nvml.EventSet, uint32) (nvml.EventData, nvml.Return) {
		time.Sleep(2 * time.Millisecond)
		if identified.Load() && delivered.CompareAndSwap(false, true) {
			return nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 48}, nvml.SUCCESS
		}
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	clock := newVirtualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	s.now = clock.now
	require.Empty(t, s.gpus)
	_, _ = s.scrape(context.Background())

	identified.Store(true)
	clock.advance(lookEvery)
	_, _ = s.scrape(context.Background())
	require.Len(t, s.gpus, 1, "found")
	require.Eventually(t, func() bool {
		m, _ := s.scrape(context.Background())
		got := pointsOf(m, "nvidia.gpu.xid.errors", nil)[dev.UUID]
		return len(got) == 1 && got[0] == 1
	}, 5*time.Second, 20*time.Millisecond, "the Xid 48 of the GPU found later is counted")
}

// An Xid storm is logged once per xidLogEvery, the next line saying how
// many went unlogged; an Xid xidLogEvery after the last logged is logged.
func TestXidLogLinesAreBoundedPerInterval(t *testing.T) {
	var x xidCounts
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	n, log := x.add(13, t0)
	assert.True(t, log, "the first is logged")
	assert.Zero(t, n)
	for i := range 3 {
		_, log = x.add(13, t0.Add(time.Duration(i+1)*time.Second))
		assert.False(t, log)
	}
	_, log = x.add(13, t0.Add(xidLogEvery-time.Nanosecond))
	assert.False(t, log)
	n, log = x.add(31, t0.Add(xidLogEvery))
	assert.True(t, log, "xidLogEvery after the last logged")
	assert.Equal(t, int64(4), n, "the four in between")
	_, log = x.add(31, t0.Add(xidLogEvery+time.Second))
	assert.False(t, log)
	n, log = x.add(31, t0.Add(2*xidLogEvery))
	assert.True(t, log)
	assert.Equal(t, int64(1), n, "only those since the last line")
	got := map[uint64]int64{}
	x.take(func(code uint64, n int64) { got[code] = n })
	assert.Equal(t, map[uint64]int64{13: 5, 31: 3}, got)
}

// Events of other types in the set (a driver may deliver them) are not
// Xid errors.
func TestXidWatcherCountsOnlyXidEvents(t *testing.T) {
	lib := fixtureServer(1)
	g := &gpu{index: 0, id: device(lib, 0).UUID, dev: lib.Devices[0]}
	w := &xidWatcher{lib: lib, logger: zap.NewNop(), byHandle: map[nvml.Device]*gpu{lib.Devices[0]: g}}
	w.record(nvml.EventData{Device: lib.Devices[0], EventType: nvml.EventTypeSingleBitEccError, EventData: 0})
	w.record(nvml.EventData{Device: lib.Devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79})
	got := map[uint64]int64{}
	g.xids.take(func(code uint64, n int64) { got[code] = n })
	assert.Equal(t, map[uint64]int64{79: 1}, got)
}

// No GPU that reports Xid events: no watcher runs, and its event set is
// freed at start.
func TestNoXidWatcherWithoutXidEvents(t *testing.T) {
	lib := fixtureServer(2)
	for i := range 2 {
		device(lib, i).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	assert.Nil(t, s.xid.Load())
	assert.Len(t, lib.EventSetFreeCalls(), 1)
	assert.Empty(t, device(lib, 0).RegisterEventsCalls())
}

// Waits that time out, a GPU lost and a wait that fails otherwise (each
// said once, however often the set answers so) leave the watcher waiting:
// the Xid after them is counted.
func TestXidWatcherWaitsThroughTimeoutsAndALostGPU(t *testing.T) {
	lib := fixtureServer(1)
	var n atomic.Int32
	lib.EventSetWaitFunc = func(nvml.EventSet, uint32) (nvml.EventData, nvml.Return) {
		time.Sleep(time.Millisecond)
		switch n.Add(1) {
		case 1, 2:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		case 3, 4:
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		case 5, 6:
			return nvml.EventData{}, nvml.ERROR_UNKNOWN
		case 7:
			return nvml.EventData{Device: lib.Devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 94}, nvml.SUCCESS
		}
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	core, logs := observer.New(zapcore.WarnLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	s := newGPUScraper(scrapeOnly(), set)
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendNVML, nil }
	require.NoError(t, s.start(context.Background(), nil))
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	require.Eventually(t, func() bool {
		m, _ := s.scrape(context.Background())
		got := pointsOf(m, "nvidia.gpu.xid.errors", nil)[device(lib, 0).UUID]
		return len(got) == 1 && got[0] == 1
	}, 10*time.Second, 20*time.Millisecond, "the Xid 94 after two timeouts, two lost answers and two failures (EventSetWait calls: %d)", n.Load())
	assert.Equal(t, 1, logs.FilterMessage("waiting for Xid events: a GPU is lost; the others' are still counted").Len())
	assert.Equal(t, 1, logs.FilterMessage("waiting for Xid events failed; waiting on: Xids may be missed while it fails").Len())
}

// An application's Xids (a kernel's bad memory access, 13 and 31, as
// NVIDIA's device plugin classes them) are counted but leave the GPU ok;
// the GPU's own (48, a double-bit ECC error) degrades it.
func TestApplicationXidsAreCountedButDoNotDegrade(t *testing.T) {
	lib := fixtureServer(1)
	events := make(chan uint64, 4)
	lib.EventSetWaitFunc = func(nvml.EventSet, uint32) (nvml.EventData, nvml.Return) {
		select {
		case code := <-events:
			return nvml.EventData{Device: lib.Devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: code}, nvml.SUCCESS
		case <-time.After(2 * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	id := device(lib, 0).UUID
	counted := func(code int64, want float64) func() bool {
		return func() bool {
			s.gpus[0].xids.mu.Lock()
			defer s.gpus[0].xids.mu.Unlock()
			return float64(s.gpus[0].xids.counts[uint64(code)]) == want
		}
	}
	events <- 13
	events <- 31
	require.Eventually(t, counted(31, 1), 5*time.Second, time.Millisecond)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float64{1}, pointsOf(m, "nvidia.gpu.xid.errors", map[string]any{"nvidia.gpu.xid": int64(13)})[id])
	assert.Equal(t, []float64{1}, pointsOf(m, "nvidia.gpu.xid.errors", map[string]any{"nvidia.gpu.xid": int64(31)})[id])
	assert.Equal(t, "ok", stateOf(m, id), "an application's Xids are not the GPU's fault")

	events <- 48
	require.Eventually(t, counted(48, 1), 5*time.Second, time.Millisecond)
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "degraded", stateOf(m, id), "a double-bit ECC error is")
}

// Every Xid of the list NVIDIA's device plugin skips as an application's
// leaves hw.status ok; every other, one this collector has no meaning for
// included, degrades it.
func TestOnlyTheApplicationsXidsLeaveTheGPUOk(t *testing.T) {
	for _, tc := range []struct {
		code     uint64
		degrades bool
	}{
		{13, false}, {31, false}, {43, false}, {45, false}, {68, false}, {109, false},
		{48, true}, {79, true}, {94, true}, {119, true}, {154, true},
	} {
		var x xidCounts
		x.add(tc.code, time.Now())
		var counted int64
		degrades := x.take(func(code uint64, n int64) { counted += n })
		assert.Equal(t, tc.degrades, degrades, "Xid %d", tc.code)
		assert.Equal(t, int64(1), counted, "Xid %d is counted", tc.code)
	}
}
