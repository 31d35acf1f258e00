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
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// maxExportBytes bounds one export, compressed and decompressed. A scrape of
// one GPU is a few kilobytes; even a large server's batch is far below this,
// so the limit only stops a runaway body from filling memory.
const maxExportBytes = 64 << 20

// Handler is an OTLP/HTTP endpoint for metrics and traces (POST /v1/metrics
// and /v1/traces, binary protobuf, optionally gzip-compressed) that adds
// every export to c. It is just enough of OTLP/HTTP for the collector's
// otlphttp exporter: JSON encoding is refused, because the exporter is
// configured for protobuf.
func (c *Capture) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/metrics", c.serveMetrics)
	mux.HandleFunc("POST /v1/traces", c.serveTraces)
	return mux
}

// An Export{Metrics,Trace}ServiceRequest has the wire format of
// MetricsData / TracesData (both are "repeated Resource... = 1"), so pmetric
// and ptrace decode them without pmetricotlp/ptraceotlp, whose gRPC half
// would add golang.org/x/net to go.mod.

func (c *Capture) serveMetrics(w http.ResponseWriter, r *http.Request) {
	serveExport(w, r, "ExportMetricsServiceRequest", func(body []byte) error {
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(body)
		if err == nil {
			c.Add(md)
		}
		return err
	})
}

func (c *Capture) serveTraces(w http.ResponseWriter, r *http.Request) {
	serveExport(w, r, "ExportTraceServiceRequest", func(body []byte) error {
		td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(body)
		if err == nil {
			c.AddTraces(td)
		}
		return err
	})
}

// serveExport checks and reads one export and hands its body to add, which
// decodes and keeps it, or says it is not a message of kind.
func serveExport(w http.ResponseWriter, r *http.Request, kind string, add func([]byte) error) {
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
	if err := add(body); err != nil {
		http.Error(w, "body is not an OTLP "+kind+": "+err.Error(), http.StatusBadRequest)
		return
	}
	// The Export*ServiceResponse of a full success has no field set, and an
	// empty message encodes as zero bytes.
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

// CollectorOptions are the settings of a check's collector.
type CollectorOptions struct {
	// Endpoint is the capture's OTLP/HTTP base URL (http://127.0.0.1:PORT).
	Endpoint string
	// OTLPAddr is where the collector's own OTLP/HTTP receiver listens
	// (127.0.0.1:PORT), for the workload's spans.
	OTLPAddr string
	// Interval is the receiver's collection_interval.
	Interval time.Duration
	// SampleInterval and FlushInterval configure the receiver's sub-second
	// sampling clock (samples.interval, samples.flush_interval).
	SampleInterval, FlushInterval time.Duration
}

// CollectorConfig is the collector configuration of a check: the gpuviz
// receiver on the real NVML backend (never auto: a check that silently read
// the simulation would prove nothing), scraping every Interval with the
// sampling clock on, and an OTLP/HTTP receiver on loopback for the
// workload's spans; the gpuviz processor in both pipelines, so that it learns
// the GPU timeline from the metrics and enriches the spans; both exported
// uncompressed to the capture. The collector's own telemetry is off so that
// it opens no port of its own that could collide with another collector on
// the machine. No batch processor: the processor already holds spans until
// the GPU data covering them has arrived, and batching would only delay the
// capture.
func CollectorConfig(o CollectorOptions) []byte {
	return fmt.Appendf(nil, `# Written by gpucheck for one hardware check; see scripts/gpu-check.
receivers:
  gpuviz:
    backend: nvml
    collection_interval: %s
    samples:
      enabled: true
      interval: %s
      flush_interval: %s
  otlp:
    protocols:
      http:
        endpoint: %q
processors:
  gpuviz: {}
exporters:
  otlp_http:
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
      processors: [gpuviz]
      exporters: [otlp_http]
    traces:
      receivers: [otlp]
      processors: [gpuviz]
      exporters: [otlp_http]
`, o.Interval, o.SampleInterval, o.FlushInterval, o.OTLPAddr, o.Endpoint)
}
