package infersim

import (
	"fmt"
	"slices"
	"strings"
)

// LLM is the shape of a decoder-only transformer, as the cost model needs
// it.
type LLM struct {
	Name          string
	Params        float64 // parameters
	Layers        int
	Hidden        int
	KVHeads       int
	HeadDim       int
	BytesPerParam float64 // 2 for BF16 weights, 1 for FP8
}

// KVBytesPerToken is the KV cache one token takes across all GPUs (keys
// and values, every layer, BF16).
func (m LLM) KVBytesPerToken() float64 {
	return 2 * float64(m.Layers*m.KVHeads*m.HeadDim) * 2
}

// WeightBytes is the size of the weights.
func (m LLM) WeightBytes() float64 { return m.Params * m.BytesPerParam }

var llms = map[string]LLM{
	"llama-3.1-8b":      {Name: "llama-3.1-8b", Params: 8.03e9, Layers: 32, Hidden: 4096, KVHeads: 8, HeadDim: 128, BytesPerParam: 2},
	"llama-3.1-70b":     {Name: "llama-3.1-70b", Params: 70.6e9, Layers: 80, Hidden: 8192, KVHeads: 8, HeadDim: 128, BytesPerParam: 2},
	"llama-3.1-70b-fp8": {Name: "llama-3.1-70b-fp8", Params: 70.6e9, Layers: 80, Hidden: 8192, KVHeads: 8, HeadDim: 128, BytesPerParam: 1},
	"qwen2.5-32b":       {Name: "qwen2.5-32b", Params: 32.8e9, Layers: 64, Hidden: 5120, KVHeads: 8, HeadDim: 128, BytesPerParam: 2},
}

// LookupLLM returns the catalogue's model of that name.
func LookupLLM(name string) (LLM, error) {
	m, ok := llms[strings.ToLower(name)]
	if !ok {
		names := make([]string, 0, len(llms))
		for n := range llms {
			names = append(names, n)
		}
		slices.Sort(names)
		return LLM{}, fmt.Errorf("unknown model %q: use one of %s", name, strings.Join(names, ", "))
	}
	return m, nil
}
