// Package score measures gpuviz against the ground truth of a simulated run
// (internal/infersim): it joins the truth's requests with the spans the
// collector exported (by trace ID) and reports how many requests were
// enriched, how far gpuviz's per-request and per-phase energy is from the
// truth, how often its bottleneck labels agree with the true limiting
// resource, whether the attributed energy adds up to what the GPUs drew, and
// how a naive estimator that knows only the span windows and a coarse energy
// counter does on the same requests.
//
// Conventions, each applied everywhere in the package:
//   - A request span is a span the processor recognised (it carries
//     gpuviz.request.family) that is not an aggregate (TGI's prefill, decode
//     and infer steps, Triton's compute span); it is enriched when it
//     carries gpuviz.energy. gpu.<phase> child spans carry no family and are
//     never request spans.
//   - A request's estimate comes from its enriched request span whose span
//     ID is the truth's span_id, else from the first enriched request span
//     of its trace in export order. Every further enriched request span of
//     the trace is an extra: it double-counts energy.
//   - Relative errors are |est − true| / true; a true value of 0 has none
//     and is counted apart. Quantiles interpolate linearly between the
//     closest ranks (the median of an even count is the mean of the middle
//     two).
//   - Label agreement is weighted by GPU time: each truth bin counts for its
//     overlap with the window on each of the request's GPUs, so a request on
//     four GPUs weighs four times one on a single GPU. The trivial baseline
//     answers the label that is most common in the very windows scored
//     (ties go to the earlier label in infersim.Labels).
//   - The baseline estimator is scored over the same requests as gpuviz (the
//     enriched ones), and each phase over those gpuviz gave a value for it,
//     so the two are compared on equal terms; coverage is reported apart.
package score // import "github.com/gpuviz/gpuviz/internal/score"
