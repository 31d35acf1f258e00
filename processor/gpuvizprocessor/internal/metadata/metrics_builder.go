package metadata // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"

import (
	"time"

	"go.opentelemetry.io/collector/filter"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
)

// NewMetricsBuilder returns a MetricsBuilder for the processor's derived
// metrics. mdatagen writes this constructor only for receivers (it takes
// receiver.Settings); this is the same constructor for a processor, kept
// by hand beside the generated code.
func NewMetricsBuilder(mbc MetricsBuilderConfig, settings processor.Settings, options ...MetricBuilderOption) *MetricsBuilder {
	mb := &MetricsBuilder{
		config:                          mbc,
		startTime:                       pcommon.NewTimestampFromTime(time.Now()),
		metricsBuffer:                   pmetric.NewMetrics(),
		buildInfo:                       settings.BuildInfo,
		resourceAttributeIncludeFilter:  make(map[string]filter.Filter),
		resourceAttributeExcludeFilter:  make(map[string]filter.Filter),
		metricGpuvizAccountingEnergy:    newMetricGpuvizAccountingEnergy(mbc.Metrics.GpuvizAccountingEnergy),
		metricGpuvizAccountingGpuTime:   newMetricGpuvizAccountingGpuTime(mbc.Metrics.GpuvizAccountingGpuTime),
		metricGpuvizGpuAnomaly:          newMetricGpuvizGpuAnomaly(mbc.Metrics.GpuvizGpuAnomaly),
		metricGpuvizGpuBottleneckState:  newMetricGpuvizGpuBottleneckState(mbc.Metrics.GpuvizGpuBottleneckState),
		metricGpuvizGpuBottleneckTime:   newMetricGpuvizGpuBottleneckTime(mbc.Metrics.GpuvizGpuBottleneckTime),
		metricGpuvizGpuEnergy:           newMetricGpuvizGpuEnergy(mbc.Metrics.GpuvizGpuEnergy),
		metricGpuvizGpuEnergyCorrection: newMetricGpuvizGpuEnergyCorrection(mbc.Metrics.GpuvizGpuEnergyCorrection),
		metricGpuvizGpuLoadPattern:      newMetricGpuvizGpuLoadPattern(mbc.Metrics.GpuvizGpuLoadPattern),
	}
	for name, ra := range map[string]ResourceAttributeConfig{"gpuviz.backend": mbc.ResourceAttributes.GpuvizBackend, "host.name": mbc.ResourceAttributes.HostName} {
		if ra.MetricsInclude != nil {
			mb.resourceAttributeIncludeFilter[name] = filter.CreateFilter(ra.MetricsInclude)
		}
		if ra.MetricsExclude != nil {
			mb.resourceAttributeExcludeFilter[name] = filter.CreateFilter(ra.MetricsExclude)
		}
	}
	for _, op := range options {
		op.apply(mb)
	}
	return mb
}
