// Package attribution keeps, per GPU, the books of its energy: which
// requests ran in each stretch of time, what each was given, and what no one
// could take. GPUs that serve the same requests (every request admitted to
// one was admitted to all) form a group and share the requests' side of
// the books, so a request on a host's 8 GPUs is admitted and released once,
// not 8 times; each GPU keeps its own energy, labels and totals.
//
// Time is cut into fixed bins (Config.Resolution). A request is admitted as
// pieces, each a stretch at a constant cost rate (its queue at rate 0, its
// prefill and decode at their estimated rates); admission adds each piece's
// rate × overlap to the bins' weight. Its bins' engine steps price it: a
// prefill is a chunk, which makes its steps long and takes their weight
// read; a decode pays less in those steps and shares the read of the
// others (Group.steps). A bin's energy, once measured and frozen, goes to
// the requests that ran in it in proportion to that cost: request r gets
// ratio × E × k_r / K̂, where K̂ estimates the bin's final cost (requests
// still running have not sent their spans). Where every GPU measured the
// bin's tensor and DRAM activity, it is fitted against earlier final bins,
// as the bin's final weight Ŵ is (load.go); else the cost admitted so far
// is scaled up as the weight is, by the share of a bin's weight that has
// usually arrived by the bin's age (learned from the ages at which
// admitted weight arrived). ratio is the sampling ratio (with head
// sampling the visible requests stand for 1/ratio as many). Requests
// released together see the same weight, moment and curve, and are given
// their decodes' life factors (Group.Life) before any is released, so the
// caller's settle groups split as if their spans had arrived at once,
// whatever the order or batching.
//
// A bin becomes final once no admitted request over it is waiting for its
// release and the caller says so (Finalize): its energy is then booked as
// idle (no weight), unsampled (1 − ratio of the rest) or attributed (what its
// requests were given), and the difference between what the requests were
// given and ratio × E — requests released before later ones were admitted
// got more than their final share — as correction. A request admitted after
// its bins are final still gets its full fair share; that share is booked as
// attributed and subtracted from correction. So, over final bins, exactly:
//
//	attributed + idle + unsampled + correction = measured energy
//
// A bin's time is split in the same proportions (a request's GPU-seconds,
// what accounting charges): over final bins with a label, whether or not
// their energy was measured, the time books close the same way against the
// time the bins' labels count.
//
// Memory is bounded: Config.Horizon / Config.Resolution bins, each
// GroupBinBytes per group and GPUBinBytes per GPU; older bins are finalised
// and dropped as time moves on, and requests reaching before the oldest bin
// get no energy for that part.
package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
