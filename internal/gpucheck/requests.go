package gpucheck

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Kinds of request scripts/gpu-requests.py runs.
const (
	// KindSynthetic is a made-up request: a bf16 matmul burst as its prefill,
	// then an HBM-bound copy loop as its decode, one request at a time.
	KindSynthetic = "synthetic"
	// KindGenerate is one sequence of a batched Hugging Face transformers
	// generate call on a randomly initialised decoder.
	KindGenerate = "hf_generate"
)

// Request is one request the workload ran and sent a span for, as it
// reports it. Times are Unix nanoseconds (time.time_ns(), the clock the
// collector stamps its data with); FirstToken is where prefill ended.
type Request struct {
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	TraceID      string `json:"trace_id"`
	SpanID       string `json:"span_id"`
	Start        int64  `json:"start_unix_nano"`
	PrefillStart int64  `json:"prefill_start_unix_nano"`
	FirstToken   int64  `json:"first_token_unix_nano"`
	End          int64  `json:"end_unix_nano"`
	PromptTokens int64  `json:"prompt_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	// Batch is how many requests shared this one's window (1 for the
	// synthetic ones).
	Batch int `json:"batch"`
	// ReferenceEnergyJ is the workload's own measurement: power it read
	// itself (the driver's power samples, else instant power it polled;
	// PowerReference.Source), integrated from the request's prefill to its
	// end (its queue runs nothing, and the processor gives it no energy),
	// each moment's energy split equally between the requests running then.
	// Nil when the workload could not read power (no pynvml).
	ReferenceEnergyJ *float64 `json:"reference_energy_j"`
	// ReferenceWindowEnergyJ is the whole GPU's energy over the same
	// stretch, unshared: a batch's total is checked against it.
	ReferenceWindowEnergyJ *float64 `json:"reference_window_energy_j,omitempty"`
	// ReferenceQueueEnergyJ (over the request's queue) and
	// ReferenceInstantEnergyJ (ReferenceEnergyJ from polled instant power,
	// where the driver's samples are the source) are for the reader, not
	// compared.
	ReferenceQueueEnergyJ   *float64 `json:"reference_queue_energy_j,omitempty"`
	ReferenceInstantEnergyJ *float64 `json:"reference_instant_energy_j,omitempty"`
}

// Skip is a part of the workload that could not run, and why (a Python
// package missing, most often).
type Skip struct {
	Part   string `json:"part"`
	Reason string `json:"reason"`
}

// PowerReference says how the workload read power for its reference.
// CounterRatio, where the source is the driver's power samples, is their
// integral over the workload's run against the energy counter's increase
// over the same stretch: how far the reference itself is from the counter.
type PowerReference struct {
	Source       string   `json:"source"`
	Samples      int      `json:"samples"`
	MedianS      float64  `json:"median_period_s"`
	MaxS         float64  `json:"max_period_s"`
	CounterRatio *float64 `json:"counter_ratio,omitempty"`
}

// RequestRun is what scripts/gpu-requests.py printed.
type RequestRun struct {
	GPUUUID  string          `json:"gpu_uuid,omitempty"`
	Requests []Request       `json:"requests"`
	Skipped  []Skip          `json:"skipped,omitempty"`
	Power    *PowerReference `json:"power_reference,omitempty"`
}

// AddLine folds one line of the request workload's standard output into r:
// {"gpu_uuid": ...}, {"request": {...}}, {"skipped": {...}} or
// {"power_reference": {...}}. Blank lines are ignored; anything else is an
// error the caller may report and go on.
func (r *RequestRun) AddLine(line string) error {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil
	}
	var msg struct {
		GPUUUID *string         `json:"gpu_uuid"`
		Request *Request        `json:"request"`
		Skipped *Skip           `json:"skipped"`
		Power   *PowerReference `json:"power_reference"`
	}
	if err := json.Unmarshal([]byte(line), &msg); err != nil {
		return fmt.Errorf("request workload printed a line that is not JSON: %q", line)
	}
	switch {
	case msg.GPUUUID != nil:
		r.GPUUUID = *msg.GPUUUID
	case msg.Request != nil:
		q := msg.Request
		if q.ID == "" || q.TraceID == "" || q.SpanID == "" {
			return fmt.Errorf("request without id, trace_id or span_id: %q", line)
		}
		if q.Start <= 0 || q.PrefillStart < q.Start || q.FirstToken <= q.PrefillStart || q.End <= q.FirstToken {
			return fmt.Errorf("request %s: times must satisfy 0 < start <= prefill_start < first_token < end: %q", q.ID, line)
		}
		r.Requests = append(r.Requests, *q)
	case msg.Skipped != nil:
		r.Skipped = append(r.Skipped, *msg.Skipped)
	case msg.Power != nil:
		r.Power = msg.Power
	default:
		return fmt.Errorf("request workload printed JSON with none of gpu_uuid, request, skipped, power_reference: %q", line)
	}
	return nil
}
