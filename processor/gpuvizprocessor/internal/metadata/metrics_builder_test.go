package metadata

import "go.opentelemetry.io/collector/processor/processortest"

// settings is what the generated MetricsBuilder test builds with.
var settings = processortest.NewNopSettings(Type)
