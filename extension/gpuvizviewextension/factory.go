package gpuvizviewextension // import "github.com/gpuviz/gpuviz/extension/gpuvizviewextension"

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/gpuviz/gpuviz/extension/gpuvizviewextension/internal/metadata"
)

// NewFactory returns the gpuviz_view extension's factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type,
		func() component.Config { return createDefaultConfig() },
		func(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			return newExtension(cfg.(*Config), set)
		},
		metadata.ExtensionStability)
}
