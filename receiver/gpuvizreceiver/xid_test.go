package gpuvizreceiver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
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
