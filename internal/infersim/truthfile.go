package infersim

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// The truth file is JSON lines, one object per line, each with exactly one
// of "header", "request" or "bin" set: the load generator writes it beside
// the spans it sends, and the scorer (cmd/gpuviz-score) reads it.

// TruthHeader opens a truth file: what was simulated.
type TruthHeader struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	GPUModel string `json:"gpu_model"`
	// GPUIDs are the GPUs' UUIDs (hw.id), by NVML index; Host their
	// host.name.
	GPUIDs     []string      `json:"gpu_ids"`
	Host       string        `json:"host"`
	BinWidthNS int64         `json:"bin_width_ns"`
	Engines    []TruthEngine `json:"engines"`
}

// TruthEngine describes one engine of the scenario.
type TruthEngine struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	Match  string `json:"match"`
	LLM    string `json:"llm"`
	GPUs   []int  `json:"gpus"`
}

// TruthRequest is a Request as written to the truth file.
type TruthRequest struct {
	TraceID      string `json:"trace_id"` // hex
	SpanID       string `json:"span_id"`  // hex, the server span's
	Engine       int    `json:"engine"`
	GPUs         []int  `json:"gpus"`
	Arrival      int64  `json:"arrival"`
	Queued       int64  `json:"queued"`
	Scheduled    int64  `json:"scheduled"`
	FirstToken   int64  `json:"first_token"`
	LastToken    int64  `json:"last_token"`
	Finished     int64  `json:"finished"`
	PromptTokens int    `json:"prompt_tokens"`
	OutputTokens int    `json:"output_tokens"`
	Preemptions  int    `json:"preemptions"`
	Finish       string `json:"finish"`
	Steps        int    `json:"steps"`
	// Chunks as [start, end, tokens]; see Request.Chunks.
	Chunks        [][3]int64 `json:"chunks,omitempty"`
	Preempted     []int64    `json:"preempted_at,omitempty"`
	Energy        float64    `json:"energy_j"`
	PrefillEnergy float64    `json:"prefill_energy_j"`
	DecodeEnergy  float64    `json:"decode_energy_j"`
}

// TruthBin is a Bin as written to the truth file.
type TruthBin struct {
	GPU    int     `json:"gpu"`
	Start  int64   `json:"start"`
	Label  string  `json:"label"`
	Energy float64 `json:"energy_j"`
	Idle   float64 `json:"idle_j"`
}

// TruthLine is one line of a truth file.
type TruthLine struct {
	Header  *TruthHeader  `json:"header,omitempty"`
	Request *TruthRequest `json:"request,omitempty"`
	Bin     *TruthBin     `json:"bin,omitempty"`
}

// Truth is a whole truth file, read back.
type Truth struct {
	Header   TruthHeader
	Requests []TruthRequest
	Bins     []TruthBin
}

// ToTruth converts a request for the truth file.
func (r Request) ToTruth() TruthRequest {
	tid, sid := r.TraceID(), r.SpanID()
	var chunks [][3]int64
	for _, c := range r.Chunks {
		chunks = append(chunks, [3]int64{c.Start, c.End, int64(c.Tokens)})
	}
	return TruthRequest{
		Chunks: chunks, Preempted: r.Preempted,
		TraceID: hex.EncodeToString(tid[:]), SpanID: hex.EncodeToString(sid[:]),
		Engine: r.Engine, GPUs: r.GPUs, Arrival: r.Arrival, Queued: r.Queued, Scheduled: r.Scheduled,
		FirstToken: r.FirstToken, LastToken: r.LastToken, Finished: r.Finished,
		PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens, Preemptions: r.Preemptions,
		Finish: r.Finish, Steps: r.Steps, Energy: r.Energy, PrefillEnergy: r.PrefillEnergy, DecodeEnergy: r.DecodeEnergy,
	}
}

// ToTruth converts a bin for the truth file.
func (b Bin) ToTruth() TruthBin {
	return TruthBin{GPU: b.GPU, Start: b.Start, Label: b.Label, Energy: b.Energy, Idle: b.Idle}
}

// TruthWriter writes a truth file. Not safe for concurrent use.
type TruthWriter struct {
	w   *bufio.Writer
	enc *json.Encoder
}

// NewTruthWriter writes the header to w and returns a writer for the rest.
func NewTruthWriter(w io.Writer, h TruthHeader) (*TruthWriter, error) {
	bw := bufio.NewWriter(w)
	tw := &TruthWriter{w: bw, enc: json.NewEncoder(bw)}
	return tw, tw.enc.Encode(TruthLine{Header: &h})
}

// Request writes one request.
func (t *TruthWriter) Request(r Request) error {
	tr := r.ToTruth()
	return t.enc.Encode(TruthLine{Request: &tr})
}

// Bin writes one bin.
func (t *TruthWriter) Bin(b Bin) error {
	tb := b.ToTruth()
	return t.enc.Encode(TruthLine{Bin: &tb})
}

// Flush writes what is buffered.
func (t *TruthWriter) Flush() error { return t.w.Flush() }

// ReadTruth reads a truth file: exactly one header, first.
func ReadTruth(r io.Reader) (*Truth, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var t Truth
	header := false
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var line TruthLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("truth line %d: %w", n, err)
		}
		switch {
		case line.Header != nil:
			if header {
				return nil, fmt.Errorf("truth line %d: a second header", n)
			}
			t.Header, header = *line.Header, true
		case !header:
			return nil, fmt.Errorf("truth line %d: the header must come first", n)
		case line.Request != nil:
			t.Requests = append(t.Requests, *line.Request)
		case line.Bin != nil:
			t.Bins = append(t.Bins, *line.Bin)
		default:
			return nil, fmt.Errorf("truth line %d: neither header, request nor bin", n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !header {
		return nil, fmt.Errorf("truth file has no header")
	}
	return &t, nil
}

// Header returns the truth header of the node: gpuIDs are its GPUs'
// hw.id values by index, host their host.name, seed the node's seed.
func (n *Node) Header(seed uint64, gpuIDs []string, host string) TruthHeader {
	h := TruthHeader{Scenario: n.sc.Name, Seed: seed, GPUModel: n.hw.Name, GPUIDs: gpuIDs, Host: host, BinWidthNS: int64(BinWidth)}
	for _, e := range n.sc.Engines {
		h.Engines = append(h.Engines, TruthEngine{Name: e.Name, Family: e.Family, Match: e.Match, LLM: e.LLM.Name, GPUs: e.GPUs})
	}
	return h
}

// Truth returns the truth of [from, to) under header h: the requests that
// finished in it, and the bins of each of h's GPUs that start in it.
func (n *Node) Truth(h TruthHeader, from, to int64) *Truth {
	t := &Truth{Header: h}
	for _, r := range n.Finished(from, to) {
		t.Requests = append(t.Requests, r.ToTruth())
	}
	for g := range h.GPUIDs {
		for _, b := range n.Bins(g, from, to) {
			t.Bins = append(t.Bins, b.ToTruth())
		}
	}
	return t
}
