// Package gpuvizprocessor joins inference spans with the GPU timeline. One
// component ID used in a metrics and a traces pipeline shares one core: the
// metrics side learns what every GPU did from the GPU metrics passing
// through; the traces side recognises inference spans (vLLM, GenAI
// conventions, TGI, Triton, user rules), holds them until samples covering
// their end have arrived, and attaches GPU statistics, phases, energy and
// bottleneck labels. Derived metrics with exemplars go out on the metrics
// side.
//
//go:generate go tool mdatagen metadata.yaml
package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"
