package main

import (
	"os"
	"time"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// The families --families chooses from in the sequential scenario and in
// synthetic mode.
var legacyFamilies = []string{infersim.FamilyVLLM, infersim.FamilyTGI, infersim.FamilyTriton}

// How the spans of the sequential scenario and of synthetic mode name their
// GPUs (--match).
const (
	// matchProcess: the resource's process.pid is the simulated worker's
	// PID on the GPU, so the processor matches by process.
	matchProcess = "process"
	// matchAttribute: the resource's gpu.uuid is the GPU's UUID.
	matchAttribute = "attribute"
	// matchHost: no hint; the processor uses every GPU of the host.
	matchHost = "host"
)

// legacySource serves the requests of the sequential schedule or of
// synthetic mode, which have no engine, from one server per family (and per
// GPU where the hint names it), each request in the family its ID falls to.
// Their resources carry host.name and process.pid as they always have, for
// the processor's host and process matching.
type legacySource struct {
	inner    requestSource
	families []string
	match    string
	service  string // vLLM's service.name
	host     string
	gpuIDs   []string // by GPU index; in synthetic mode the one --gpu-uuid
	seq      int
	servers  map[legacyServer]*server
}

// legacyServer tells the servers apart: a family, and the GPU its hint
// names (-1: none).
type legacyServer struct {
	family string
	gpu    int
}

// Finished converts the requests that ended in [from, to). The schedule's
// request becomes an engine's: queued on arrival (vLLM stamps arrival_time
// after the OpenAI layer tokenised the prompt), except that TGI validates
// and tokenises in its router first; first scheduled at the prefill, first
// token at the decode's start, last token and finished at its end.
func (s *legacySource) Finished(from, to int64) []served {
	reqs := s.inner.Requests(from, to)
	out := make([]served, 0, len(reqs))
	for _, r := range reqs {
		family := s.family(r)
		p := samplingOf(r)
		srv := s.server(family, r)
		queued := r.Arrival
		if family == infersim.FamilyTGI {
			queued += tgiValidation(r)
		}
		s.seq++
		out = append(out, served{
			req: infersim.Request{
				GPUs: srv.engine.GPUs, Seq: s.seq, Key: r.ID,
				Arrival: r.Arrival, Queued: queued, Scheduled: r.PrefillStart,
				FirstToken: r.DecodeStart, LastToken: r.End, Finished: r.End,
				PromptTokens: int(r.PromptTokens), OutputTokens: int(r.OutputTokens),
				MaxTokens: int(p.maxTokens), Finish: p.finish,
			},
			srv: srv,
		})
	}
	return out
}

func (s *legacySource) family(r nvmlsim.Request) string {
	if len(s.families) == 1 {
		return s.families[0]
	}
	return s.families[splitmix(r.ID^0xfa)%uint64(len(s.families))]
}

// server returns the family's server that served r.
func (s *legacySource) server(family string, r nvmlsim.Request) *server {
	key := legacyServer{family: family, gpu: -1}
	switch s.match {
	case matchProcess:
		key.gpu = r.GPU
	case matchAttribute:
		key.gpu = max(r.GPU, 0) // synthetic requests ran on the one GPU named
	}
	if srv, ok := s.servers[key]; ok {
		return srv
	}
	e := infersim.Engine{Name: s.service, Family: family, Match: infersim.MatchHost}
	if key.gpu >= 0 {
		e.GPUs = []int{key.gpu}
	}
	if s.match == matchAttribute {
		e.Match = infersim.MatchAttribute
	}
	pid := int64(os.Getpid())
	if s.match == matchProcess && key.gpu >= 0 {
		pid = int64(nvmlsim.SimulatedPID(key.gpu))
	}
	srv := &server{engine: e, env: inferspans.Env{
		Host:     s.host,
		GPUIDs:   s.gpuIDs,
		Resource: map[string]any{"host.name": s.host, "process.pid": pid},
	}}
	if s.servers == nil {
		s.servers = map[legacyServer]*server{}
	}
	s.servers[key] = srv
	return srv
}

// splitmix is SplitMix64's finaliser: per-request choices are drawn from the
// request's ID through it, so a simulated request is the same every run.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// sampling is how a request was capped and how it finished.
type sampling struct {
	maxTokens int64
	finish    string
}

var maxTokenCaps = []int64{256, 512, 1024, 2048, 4096, 8192, 16384}

// samplingOf derives the request's cap from its ID: one request in five ran
// into max_tokens (finish reason "length", max_tokens = the output length);
// the others stopped on their own below the smallest usual cap above their
// output.
func samplingOf(r nvmlsim.Request) sampling {
	if (splitmix(r.ID^0x5a17)>>32)%5 == 0 {
		return sampling{maxTokens: r.OutputTokens, finish: infersim.FinishLength}
	}
	s := sampling{maxTokens: maxTokenCaps[len(maxTokenCaps)-1], finish: infersim.FinishStop}
	for _, c := range maxTokenCaps {
		if c > r.OutputTokens {
			s.maxTokens = c
			break
		}
	}
	return s
}

// tgiValidation is how long TGI's validation (tokenisation, on the CPU)
// took: 0.3 to 1.5 ms, never more than half the time before the prefill.
func tgiValidation(r nvmlsim.Request) int64 {
	v := int64(300*time.Microsecond) + int64(splitmix(r.ID^0x7e1)%uint64(1200*time.Microsecond))
	return min(v, (r.PrefillStart-r.Arrival)/2)
}
