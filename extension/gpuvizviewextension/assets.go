package gpuvizviewextension // import "github.com/gpuviz/gpuviz/extension/gpuvizviewextension"

import (
	"embed"
	"io/fs"
)

// dist is the page as built by `make web` (committed, so a clean clone
// builds and no CDN is needed at run time).
//
//go:embed web/dist
var dist embed.FS

// assets is the page's root: index.html and assets/.
func assets() fs.FS {
	sub, err := fs.Sub(dist, "web/dist")
	if err != nil {
		panic(err) // the path is fixed at compile time
	}
	return sub
}
