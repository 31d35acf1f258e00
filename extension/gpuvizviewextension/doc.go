// Package gpuvizviewextension serves the live view: a page (embedded, no
// CDN) and a read-only JSON API over what every gpuviz processor that
// registered with it sees — per GPU, its signals on one time axis and its
// bottleneck labels; the recent inference requests with their phases,
// energies and trace IDs; a summary. The store behind it is
// internal/view; the API is documented in docs/view.md.
//
//go:generate go tool mdatagen metadata.yaml
package gpuvizviewextension // import "github.com/gpuviz/gpuviz/extension/gpuvizviewextension"
