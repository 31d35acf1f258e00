// Package view is the live view's bounded store and its JSON API.
//
// A Registry holds one Source per gpuviz processor (its component ID). A
// source keeps, per GPU, the GPU's identity and, per signal, one bucket
// (min, max, sum, count) per second over the retention; the bottleneck
// label time per second (the processor's 100 ms labels, summed per label);
// and a ring of the last max_requests requests with their phases. Every
// buffer is allocated when its GPU or source is created and never grows:
// writes in the steady state allocate nothing (BenchmarkAdd). The bound in
// bytes is documented in docs/view.md and checked by TestSizes.
//
// Writers (the processor's goroutines) and readers (HTTP) may run at once:
// a GPU's buckets have their own mutex, the GPU table and the request ring
// theirs.
//
// The processor knows nothing of HTTP, the extension nothing of the
// processor: both meet here, through Registrar.
package view // import "github.com/gpuviz/gpuviz/internal/view"
