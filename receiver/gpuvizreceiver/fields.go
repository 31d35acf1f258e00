package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"encoding/binary"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// fieldSpec is one NVML field value the receiver reads and the metric that
// needs it. Field values are read in one batched call per GPU per scrape,
// however many there are.
type fieldSpec struct {
	id      uint32
	enabled func(m *metadata.MetricsConfig) bool
}

// allLinks is the ScopeId that asks for a value summed over all NVLinks.
const allLinks = math.MaxUint32

var (
	pcieBytes    = func(m *metadata.MetricsConfig) bool { return m.HwGpuIo.Enabled }
	nvlinkBytes  = func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuNvlinkIo.Enabled }
	nvlinkErrors = func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuNvlinkErrors.Enabled }
	// NVLink capacity is read every scrape, not once at discovery: a link
	// can retrain at a lower speed or go down, and the two fields ride in
	// the batched call that is made anyway.
	nvlinkCapacity = func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuNvlinkCapacity.Enabled }
	// Health fields are read whenever hw.status is on, since they decide it.
	eccErrors    = func(m *metadata.MetricsConfig) bool { return m.HwErrors.Enabled || m.HwStatus.Enabled }
	remapRows    = func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuMemoryRemappedRows.Enabled }
	remapPending = func(m *metadata.MetricsConfig) bool {
		return m.NvidiaGpuMemoryRemapPending.Enabled || m.HwStatus.Enabled
	}
	remapFailed = func(m *metadata.MetricsConfig) bool {
		return m.NvidiaGpuMemoryRemapFailed.Enabled || m.HwStatus.Enabled
	}
	retiredPages = func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuMemoryRetiredPages.Enabled }
	retirePend   = func(m *metadata.MetricsConfig) bool { return m.HwStatus.Enabled }
	pcieReplays  = func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuPcieReplays.Enabled }
)

var fieldSpecs = []fieldSpec{
	{nvml.FI_DEV_PCIE_COUNT_RX_BYTES, pcieBytes},
	{nvml.FI_DEV_PCIE_COUNT_TX_BYTES, pcieBytes},
	{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, nvlinkBytes},
	{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvlinkBytes},
	{nvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, nvlinkErrors},
	{nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, nvlinkErrors},
	{nvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, nvlinkErrors},
	{nvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, nvlinkErrors},
	{nvml.FI_DEV_NVLINK_LINK_COUNT, nvlinkCapacity},
	{nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON, nvlinkCapacity},
	{nvml.FI_DEV_ECC_SBE_VOL_TOTAL, eccErrors},
	{nvml.FI_DEV_ECC_DBE_VOL_TOTAL, eccErrors},
	{nvml.FI_DEV_REMAPPED_COR, remapRows},
	{nvml.FI_DEV_REMAPPED_UNC, remapRows},
	{nvml.FI_DEV_REMAPPED_PENDING, remapPending},
	{nvml.FI_DEV_REMAPPED_FAILURE, remapFailed},
	{nvml.FI_DEV_RETIRED_SBE, retiredPages},
	{nvml.FI_DEV_RETIRED_DBE, retiredPages},
	{nvml.FI_DEV_RETIRED_PENDING, retirePend},
	{nvml.FI_DEV_PCIE_REPLAY_COUNTER, pcieReplays},
}

// fieldRequest is a GPU's batch of field values, reused every scrape.
// Fields the GPU answers NOT_SUPPORTED for are dropped from it for good.
type fieldRequest []nvml.FieldValue

func newFieldRequest(m *metadata.MetricsConfig) fieldRequest {
	var req fieldRequest
	for _, f := range fieldSpecs {
		if f.enabled(m) {
			scope := uint32(0)
			if isNVLinkField(f.id) {
				scope = allLinks
			}
			req = append(req, nvml.FieldValue{FieldId: f.id, ScopeId: scope})
		}
	}
	return req
}

func isNVLinkField(id uint32) bool {
	switch id {
	case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
		return true
	}
	return false
}

// decodeValue decodes a field or sample value by its declared type.
func decodeValue(vt nvml.ValueType, raw [8]byte) float64 {
	b := raw[:]
	switch vt {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(b))
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.LittleEndian.Uint16(b))
	default: // unsigned long, unsigned long long
		return float64(binary.LittleEndian.Uint64(b))
	}
}

// fieldWidth is the bit width of a counter field's value, for wrap handling.
func fieldWidth(v *nvml.FieldValue) uint {
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT, nvml.VALUE_TYPE_SIGNED_INT:
		return 32
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return 16
	}
	return 64
}

// ask makes the batched call (the answers of the previous one cleared)
// and passes each entry NVML answered to take. Entries the GPU does not
// know (NOT_SUPPORTED, or INVALID_ARGUMENT from a driver older than the
// field) go to dropped instead, and leave the request for good.
func (req *fieldRequest) ask(dev nvml.Device, take, dropped func(*nvml.FieldValue)) nvml.Return {
	if len(*req) == 0 {
		return nvml.SUCCESS
	}
	for i := range *req {
		(*req)[i] = nvml.FieldValue{FieldId: (*req)[i].FieldId, ScopeId: (*req)[i].ScopeId}
	}
	if ret := dev.GetFieldValues(*req); ret != nvml.SUCCESS {
		return ret
	}
	kept := (*req)[:0]
	for i := range *req {
		v := &(*req)[i]
		switch nvml.Return(v.NvmlReturn) {
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			dropped(v)
			continue
		}
		take(v)
		kept = append(kept, *v)
	}
	*req = kept
	return nvml.SUCCESS
}

// askFirst is ask for the first n fields only; the others stay asked for,
// in their order, after those ask kept.
func (req *fieldRequest) askFirst(n int, dev nvml.Device, take, dropped func(*nvml.FieldValue)) nvml.Return {
	head := (*req)[:n:n]
	ret := head.ask(dev, take, dropped)
	kept := copy((*req)[len(head):], (*req)[n:])
	*req = (*req)[:len(head)+kept]
	return ret
}

// readFields makes the GPU's batched field-value call and records what each
// field says.
func (s *gpuScraper) readFields(g *gpu, ts pcommon.Timestamp) nvml.Return {
	var failed bool
	var links nvlinkCapacityFields
	ret := g.fields.ask(g.dev, func(v *nvml.FieldValue) {
		if nvml.Return(v.NvmlReturn) != nvml.SUCCESS {
			failed = true
			return
		}
		if !links.take(v) {
			s.recordField(g, v, ts)
		}
	}, func(v *nvml.FieldValue) {
		s.logger.Info("GPU does not support a field value; it will not be asked again",
			zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.Uint32("field", v.FieldId))
		if v.FieldId == nvml.FI_DEV_PCIE_COUNT_RX_BYTES {
			g.counters.pcieFromThroughput = true
		}
	})
	if bps, ok := links.bytesPerSecond(); ok {
		g.mb.RecordNvidiaGpuNvlinkCapacityDataPoint(ts, bps, g.id, g.name)
	}
	if ret == nvml.SUCCESS && failed {
		return nvml.ERROR_UNKNOWN
	}
	return ret
}

// nvlinkCapacityFields gathers the two fields nvidia.gpu.nvlink.capacity
// is made of from one batched call.
type nvlinkCapacityFields struct {
	count, speedMBps     uint64
	haveCount, haveSpeed bool
}

// take keeps v if it is one of the capacity's fields.
func (c *nvlinkCapacityFields) take(v *nvml.FieldValue) bool {
	x := uint64(decodeValue(nvml.ValueType(v.ValueType), v.Value))
	switch v.FieldId {
	case nvml.FI_DEV_NVLINK_LINK_COUNT:
		c.count, c.haveCount = x, true
	case nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON:
		c.speedMBps, c.haveSpeed = x, true
	default:
		return false
	}
	return true
}

// bytesPerSecond is the links' capacity per direction: NVML's speed is per
// link and direction, in MB/s of 10^6 bytes. A GPU that answered only one
// of the fields, or counts no links, has none to report.
func (c *nvlinkCapacityFields) bytesPerSecond() (int64, bool) {
	if !c.haveCount || !c.haveSpeed || c.count == 0 {
		return 0, false
	}
	return int64(c.count * c.speedMBps * 1_000_000), true
}

func (s *gpuScraper) recordField(g *gpu, v *nvml.FieldValue, ts pcommon.Timestamp) {
	x := decodeValue(nvml.ValueType(v.ValueType), v.Value)
	mb := g.mb
	id, name, vendor, model, driver := g.id, g.name, g.vendor, g.model, g.driver
	switch v.FieldId {
	case nvml.FI_DEV_PCIE_COUNT_RX_BYTES:
		total := g.counters.pcie[rx].observe(uint64(x), fieldWidth(v))
		mb.RecordHwGpuIoDataPoint(ts, int64(total), id, name, vendor, model, driver, metadata.AttributeNetworkIoDirectionReceive)
	case nvml.FI_DEV_PCIE_COUNT_TX_BYTES:
		total := g.counters.pcie[tx].observe(uint64(x), fieldWidth(v))
		mb.RecordHwGpuIoDataPoint(ts, int64(total), id, name, vendor, model, driver, metadata.AttributeNetworkIoDirectionTransmit)
	case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
		total := g.counters.nvlink[rx].observe(uint64(x), fieldWidth(v))
		mb.RecordNvidiaGpuNvlinkIoDataPoint(ts, int64(total)*1024, id, name, metadata.AttributeNetworkIoDirectionReceive)
	case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
		total := g.counters.nvlink[tx].observe(uint64(x), fieldWidth(v))
		mb.RecordNvidiaGpuNvlinkIoDataPoint(ts, int64(total)*1024, id, name, metadata.AttributeNetworkIoDirectionTransmit)
	case nvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL:
		mb.RecordNvidiaGpuNvlinkErrorsDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuNvlinkErrorTypeCrcFlit)
	case nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
		mb.RecordNvidiaGpuNvlinkErrorsDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuNvlinkErrorTypeCrcData)
	case nvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL:
		mb.RecordNvidiaGpuNvlinkErrorsDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuNvlinkErrorTypeReplay)
	case nvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
		mb.RecordNvidiaGpuNvlinkErrorsDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuNvlinkErrorTypeRecovery)
	case nvml.FI_DEV_ECC_SBE_VOL_TOTAL:
		mb.RecordHwErrorsDataPoint(ts, int64(x), id, name, vendor, model, driver, metadata.AttributeHwTypeGpu, metadata.AttributeErrorTypeCorrected)
	case nvml.FI_DEV_ECC_DBE_VOL_TOTAL:
		if g.counters.seenUncorrected && int64(x) > g.counters.uncorrected {
			g.worsen(metadata.AttributeHwStateDegraded)
		}
		g.counters.uncorrected, g.counters.seenUncorrected = int64(x), true
		mb.RecordHwErrorsDataPoint(ts, int64(x), id, name, vendor, model, driver, metadata.AttributeHwTypeGpu, metadata.AttributeErrorTypeUncorrected)
	case nvml.FI_DEV_REMAPPED_COR:
		mb.RecordNvidiaGpuMemoryRemappedRowsDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuMemoryRemapCauseCorrectable)
	case nvml.FI_DEV_REMAPPED_UNC:
		mb.RecordNvidiaGpuMemoryRemappedRowsDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuMemoryRemapCauseUncorrectable)
	case nvml.FI_DEV_REMAPPED_PENDING:
		if x != 0 {
			g.worsen(metadata.AttributeHwStateDegraded)
		}
		mb.RecordNvidiaGpuMemoryRemapPendingDataPoint(ts, boolInt(x != 0), id, name)
	case nvml.FI_DEV_REMAPPED_FAILURE:
		if x != 0 {
			g.worsen(metadata.AttributeHwStateFailed)
		}
		mb.RecordNvidiaGpuMemoryRemapFailedDataPoint(ts, boolInt(x != 0), id, name)
	case nvml.FI_DEV_RETIRED_SBE:
		mb.RecordNvidiaGpuMemoryRetiredPagesDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuMemoryRetirementCauseSingleBitEcc)
	case nvml.FI_DEV_RETIRED_DBE:
		mb.RecordNvidiaGpuMemoryRetiredPagesDataPoint(ts, int64(x), id, name, metadata.AttributeNvidiaGpuMemoryRetirementCauseDoubleBitEcc)
	case nvml.FI_DEV_RETIRED_PENDING:
		if x != 0 {
			g.worsen(metadata.AttributeHwStateDegraded)
		}
	case nvml.FI_DEV_PCIE_REPLAY_COUNTER:
		mb.RecordNvidiaGpuPcieReplaysDataPoint(ts, int64(x), id, name)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

const (
	rx = 0
	tx = 1
)

// counters turns the driver's wrapping byte counters into monotonic totals
// since the receiver started.
type counters struct {
	pcie   [2]wrappingCounter
	nvlink [2]wrappingCounter
	// pcieFromThroughput is set when the GPU lacks the PCIe byte counters:
	// hw.gpu.io is then integrated from the throughput readings.
	pcieFromThroughput bool
	pcieLastRead       pcommon.Timestamp

	uncorrected     int64
	seenUncorrected bool
}

// wrappingCounter accumulates increments of a counter that wraps at its bit
// width. It cannot see more than one wrap between two readings: at 32 bits
// and 64 GB/s that is one scrape every 60 ms, at 64 bits never.
type wrappingCounter struct {
	last  uint64
	total uint64
	seen  bool
}

// wrapMargin is how close to its top a 64-bit counter must have been for a
// step back to be a wrap: 2^60 bytes is 36 years at 1 TB/s. Any other step
// back of a 64-bit counter is a reset (a GPU reset or a driver reload
// restarts the counters from zero), and what it counted since is raw. A
// 32-bit counter wraps every minute or so under load, so a step back is
// always read as a wrap.
const wrapMargin = 1 << 60

func (c *wrappingCounter) observe(raw uint64, width uint) uint64 {
	if c.seen {
		delta := raw - c.last
		switch {
		case width < 64:
			delta &= 1<<width - 1
		case raw < c.last && c.last < math.MaxUint64-wrapMargin:
			delta = raw
		}
		c.total += delta
	}
	c.last, c.seen = raw, true
	return c.total
}

// add accumulates an amount measured some other way (integrated throughput).
func (c *wrappingCounter) add(n uint64) uint64 {
	c.total += n
	return c.total
}
