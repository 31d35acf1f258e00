package gpucheck

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// maxExportBytes bounds one export, compressed and decompressed. A scrape of
// one GPU is a few kilobytes; even a large server's batch is far below this,
// so the limit only stops a runaway body from filling memory.
const maxExportBytes = 64 << 20

// Handler is an OTLP/HTTP metrics endpoint (POST /v1/metrics, binary protobuf,
// optionally gzip-compressed) that adds every export to c. It is just enough
// of OTLP/HTTP for the collector's otlphttp exporter: JSON encoding is
// refused, because the exporter is configured for protobuf.
func (c *Capture) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/metrics", c.serveExport)
	return mux
}

func (c *Capture) serveExport(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("Content-Type %q: only application/x-protobuf is accepted", r.Header.Get("Content-Type")),
			http.StatusUnsupportedMediaType)
		return
	}
	body, status, err := readBody(w, r)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	// An ExportMetricsServiceRequest has the wire format of MetricsData (both
	// are "repeated ResourceMetrics resource_metrics = 1"), so pmetric decodes
	// it without pmetricotlp, whose gRPC half would add golang.org/x/net to
	// go.mod.
	md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(body)
	if err != nil {
		http.Error(w, "body is not an OTLP ExportMetricsServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.Add(md)

	// The ExportMetricsServiceResponse of a full success has no field set,
	// and an empty message encodes as zero bytes.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// readBody reads the request body, decompressing it per Content-Encoding, and
// on failure says which HTTP status answers it.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxExportBytes)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("gzip body: %w", err)
		}
		defer gz.Close()
		body = gz
	default:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Encoding %q: only gzip or none is accepted", enc)
	}
	data, err := io.ReadAll(io.LimitReader(body, maxExportBytes+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || len(data) > maxExportBytes:
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", maxExportBytes)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	return data, 0, nil
}

// CollectorConfig is the collector configuration of a check: the gpuviz
// receiver on the real NVML backend (never auto: a check that silently read
// the simulation would prove nothing), scraping every interval, exported
// uncompressed to the capture at endpoint (http://127.0.0.1:PORT). The
// collector's own telemetry is off so that it opens no port of its own that
// could collide with another collector on the machine.
func CollectorConfig(endpoint string, interval time.Duration) []byte {
	return fmt.Appendf(nil, `# Written by gpucheck for one hardware check; see scripts/gpu-check.
receivers:
  gpuviz:
    backend: nvml
    collection_interval: %s
exporters:
  otlphttp:
    endpoint: %q
    compression: none
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuviz]
      exporters: [otlphttp]
`, interval, endpoint)
}
