// Package gpuvizreceiver reads NVIDIA GPUs through NVML and emits OpenTelemetry
// hardware metrics (hw.gpu.*, hw.power, hw.energy, ...) plus NVIDIA-specific
// signals under the nvidia.gpu namespace. Without a GPU it can read a clearly
// labelled simulation of NVIDIA servers running an inference workload.
//
//go:generate go tool mdatagen metadata.yaml
package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"
