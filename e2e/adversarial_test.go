//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gpuviz/gpuviz/internal/adversarial"
	"github.com/gpuviz/gpuviz/internal/procs"
)

const (
	adversarialSpans = 1_000_000
	// pooledSpans go through a collector with pdata.useProtoPooling on,
	// where the pipeline hands a batch's memory back to a pool as soon as
	// the processor returns unless it holds a reference.
	pooledSpans      = 200_000
	adversarialBatch = 1000
	// Every adversarialSample-th span is kept as sent and as received, and
	// compared: prime, so that every case of the table is sampled.
	adversarialSample = 97
)

const adversarialCollectorConfig = `# Written by e2e/adversarial_test.go: adversarial spans over OTLP/gRPC
# through the gpuviz processor (defaults) to the test's OTLP/gRPC server;
# the simulated gpuviz receiver feeds the processor 8 GPUs.
receivers:
  gpuviz:
    collection_interval: 1s
    backend: simulated
    simulated:
      model: h200
      gpus: 8
      seed: 1
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[1]d
      http:
        endpoint: 127.0.0.1:%[2]d
processors:
  gpuviz: {}
exporters:
  debug:
    verbosity: basic
  otlp_grpc:
    endpoint: 127.0.0.1:%[3]d
    tls:
      insecure: true
    compression: none
    sending_queue:
      block_on_overflow: true
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %[4]d
  pipelines:
    metrics:
      receivers: [gpuviz]
      processors: [gpuviz]
      exporters: [debug]
    traces:
      receivers: [otlp]
      processors: [gpuviz]
      exporters: [otlp_grpc]
`

// adversarialSink is the collector's OTLP/gRPC destination: it counts what
// comes out by sequence number (each original exactly once) and phase
// spans apart, and keeps the sampled spans.
type adversarialSink struct {
	ptraceotlp.UnimplementedGRPCServer
	mu       sync.Mutex
	seen     []bool // by sequence number
	repeated int
	unknown  int // spans of a sequence number never sent
	phases   int
	children int // gpu.request spans (results_on: child)
	sampled  map[int64]ptrace.Traces
}

func (s *adversarialSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	adversarial.EachSpan(req.Traces(), func(res pcommon.Resource, scope pcommon.InstrumentationScope, sp ptrace.Span) {
		_, seq, ok := adversarial.CaseOf(sp)
		switch {
		case !ok && sp.Name() == "gpu.request":
			s.children++
		case !ok:
			s.phases++
		case seq < 0 || seq >= int64(len(s.seen)):
			s.unknown++
		case s.seen[seq]:
			s.repeated++
		default:
			s.seen[seq] = true
			if seq%adversarialSample == 0 {
				s.sampled[seq] = adversarial.Single(res, scope, sp)
			}
		}
	})
	return ptraceotlp.NewExportResponse(), nil
}

func (s *adversarialSink) counts() (originals, phases, children int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ok := range s.seen {
		if ok {
			originals++
		}
	}
	return originals, s.phases, s.children
}

// sentTally is what the test sent.
type sentTally struct {
	byOutcome map[adversarial.Outcome]int
	malformed map[string]float64 // by the processor's reason
	sampled   map[int64]ptrace.Traces
	cases     map[int64]adversarial.Case
}

// promText is one scrape of the collector's Prometheus endpoint.
type promText string

var reasonLabel = regexp.MustCompile(`reason="([^"]*)"`)

// sum adds a metric's series (a counter may carry _total) whose labels
// match label (any when "").
func (m promText) sum(name, label string) float64 {
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(m)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, _ := strings.Cut(line, " ")
		metric, labels, _ := strings.Cut(series, "{")
		if metric != name && metric != name+"_total" || !strings.Contains(labels, label) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			total += v
		}
	}
	return total
}

// reasons returns the unenriched spans by reason.
func (m promText) reasons() map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(string(m), "\n") {
		if !strings.HasPrefix(line, "otelcol_processor_gpuviz_spans_unenriched") {
			continue
		}
		if r := reasonLabel.FindStringSubmatch(line); r != nil {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			out[r[1]] += v
		}
	}
	return out
}

func scrapePromText(port int) (promText, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return promText(b.String()), err
}

// TestAdversarial sends 10^6 adversarial spans (internal/adversarial: every
// recogniser's edge cases, huge, mistyped, NaN, future and zero
// timestamps, many events) through the built collector with the gpuviz
// processor on simulated GPUs, as fast as it takes them: no panic, every
// span out exactly once (the collector's counters and the test's server
// agree; phase spans counted apart), malformed spans counted by reason, and
// the sampled spans that pass through identical to what was sent. Requests
// pdata cannot decode (IDs of the wrong length, attributes nested too deep)
// are refused whole. It needs only the
// collector (make build):
//
//	go test -tags e2e -count=1 -run TestAdversarial -v ./e2e/
//
// The second run does the same with the collector's pdata.useProtoPooling
// feature gate on, with fewer spans: a held batch whose memory went back to
// the pool would come out changed, twice, or not at all.
func TestAdversarial(t *testing.T) {
	t.Run("default", func(t *testing.T) { runAdversarial(t, adversarialSpans) })
	t.Run("proto_pooling", func(t *testing.T) {
		runAdversarial(t, pooledSpans, "--feature-gates=pdata.useProtoPooling")
	})
	// The request spans go on at once, untouched; each enriched one's
	// results follow on a child gpu.request.
	t.Run("results_on_child", func(t *testing.T) {
		runAdversarial(t, pooledSpans, "--set=processors::gpuviz::results_on=child")
	})
}

// runAdversarial sends spans adversarial spans through the built collector
// started with args.
func runAdversarial(t *testing.T, spans int, args ...string) {
	onChild := slices.Contains(args, "--set=processors::gpuviz::results_on=child")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz"))
	_, err = os.Stat(bin)
	require.NoError(t, err, "build the collector first: make build")

	sink := &adversarialSink{seen: make([]bool, spans), sampled: map[int64]ptrace.Traces{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	ptraceotlp.RegisterGRPCServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	work := t.TempDir()
	ports, err := procs.FreePorts(3)
	require.NoError(t, err)
	grpcPort, httpPort, telemetryPort := ports[0], ports[1], ports[2]
	conf := filepath.Join(work, "adversarial-collector.yaml")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, adversarialCollectorConfig,
		grpcPort, httpPort, lis.Addr().(*net.TCPAddr).Port, telemetryPort), 0o644))
	group, err := procs.NewGroup(work)
	require.NoError(t, err)
	collector, err := group.Spawn("collector", bin, append([]string{"--config", conf}, args...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(collector.Log); err == nil {
				t.Logf("collector log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	require.NoError(t, procs.WaitReady(ctx, collector, procs.TCPReady(fmt.Sprintf("127.0.0.1:%d", grpcPort))))
	// The timeline knows the GPUs before the first span: none passes for
	// want of GPU data.
	require.Eventually(t, func() bool {
		m, err := scrapePromText(telemetryPort)
		return err == nil && m.sum("otelcol_processor_gpuviz_gpus", "") == 8
	}, time.Minute, 100*time.Millisecond, "the simulated GPUs reach the processor")

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)

	start := time.Now()
	sent, retries := sendAdversarial(ctx, t, client, spans)
	sendTime := time.Since(start)
	t.Logf("sent %d spans in %d batches in %v (%.0f spans/s), %d retries on backpressure",
		spans, spans/adversarialBatch, sendTime.Round(time.Millisecond), float64(spans)/sendTime.Seconds(), retries)

	// Drained: the exporter has sent every accepted span and the phase
	// spans, and the server has them.
	var m promText
	require.Eventually(t, func() bool {
		if m, err = scrapePromText(telemetryPort); err != nil {
			return false
		}
		originals, phases, children := sink.counts()
		want := m.sum("otelcol_receiver_accepted_spans", "") + m.sum("otelcol_processor_gpuviz_phase_spans_added", "")
		if onChild {
			want += m.sum("otelcol_processor_gpuviz_spans_enriched", "")
		}
		return m.sum("otelcol_processor_gpuviz_pending_spans", "") == 0 && m.sum("otelcol_exporter_sent_spans", "") == want &&
			float64(originals+phases+children) == want
	}, 3*time.Minute, 250*time.Millisecond, "the collector drains")
	drainTime := time.Since(start) - sendTime
	done, _ := collector.Exited()
	require.False(t, done, "the collector is still running")

	// Requests pdata cannot decode (IDs of the wrong length, attributes
	// nested too deep): refused whole, the well-formed span beside the bad
	// one included.
	for name, body := range adversarial.RefusedRequests(time.Now()) {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/traces", httpPort), "application/x-protobuf", bytes.NewReader(body))
		require.NoError(t, err, name)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
	}
	mem, err := collector.Memory()
	require.NoError(t, err)
	hwm := mem.Peak
	m, err = scrapePromText(telemetryPort)
	require.NoError(t, err)
	done, _ = collector.Exited()
	require.False(t, done, "the collector is still running")

	accepted := m.sum("otelcol_receiver_accepted_spans", "")
	phaseSpans := m.sum("otelcol_processor_gpuviz_phase_spans_added", "")
	assert.EqualValues(t, spans, accepted, "the receiver accepted every span, and none of the refused requests")
	assert.Zero(t, m.sum("otelcol_receiver_refused_spans", ""))
	assert.Zero(t, m.sum("otelcol_exporter_send_failed_spans", ""))
	assert.Zero(t, m.sum("otelcol_processor_gpuviz_spans_refused", ""))
	enriched := m.sum("otelcol_processor_gpuviz_spans_enriched", "")
	added := 0.0 // gpu.request spans
	if onChild {
		added = enriched
	}
	assert.Equal(t, accepted+phaseSpans+added, m.sum("otelcol_exporter_sent_spans", ""), "the exporter sent the originals, the phase spans and any gpu.request spans")
	originals, phases, children := sink.counts()
	assert.EqualValues(t, added, children, "a gpu.request for each enriched span with results_on: child, else none")
	assert.Equal(t, spans, originals, "every original span came out")
	assert.Zero(t, sink.repeated, "no span came out twice")
	assert.Zero(t, sink.unknown)
	assert.EqualValues(t, phaseSpans, phases, "the phase spans the processor reports, apart")

	reasons := m.reasons()
	unenriched := 0.0
	for r, n := range reasons {
		if strings.HasPrefix(r, "malformed_") {
			assert.Equal(t, sent.malformed[r], n, "counted %s", r)
		} else {
			unenriched += n
		}
	}
	for r, n := range sent.malformed {
		assert.Equal(t, n, reasons[r], "sent %s", r)
	}
	assert.EqualValues(t, sent.byOutcome[adversarial.Enriched], enriched+unenriched,
		"every well-formed span enriched or passed through for a reason other than malformed")

	// The sampled spans as they came out, against what was sent.
	sink.mu.Lock()
	compared := 0
	for seq, want := range sent.sampled {
		got, ok := sink.sampled[seq]
		if assert.True(t, ok, "sampled span %d came out", seq) {
			check := adversarial.Check
			if onChild {
				check = adversarial.CheckUntouched
			}
			assert.NoError(t, check(sent.cases[seq], want, got))
			compared++
		}
	}
	sink.mu.Unlock()
	assert.GreaterOrEqual(t, compared, spans/adversarialSample, "every %d-th span sampled and compared", adversarialSample)

	logBytes, err := os.ReadFile(collector.Log)
	require.NoError(t, err)
	assert.NotContains(t, strings.ToLower(string(logBytes)), "panic", "the collector's log")

	t.Logf("adversarial: %d spans (%d enriched-class, %d malformed, %d not inference), %d cases, send %v, drain %v, total %v",
		spans, sent.byOutcome[adversarial.Enriched], sent.byOutcome[adversarial.Malformed], sent.byOutcome[adversarial.NotInference],
		len(adversarial.Cases()), sendTime.Round(time.Millisecond), drainTime.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("adversarial: accepted %.0f, sent by the exporter %.0f (phase spans %.0f), received %d + %d phase + %d gpu.request; enriched %.0f; retries %d; %d sampled spans compared; VmHWM %d bytes (%.1f MiB)",
		accepted, m.sum("otelcol_exporter_sent_spans", ""), phaseSpans, originals, phases, children, enriched, retries, compared, hwm, float64(hwm)/(1<<20))
	t.Logf("adversarial: unenriched by reason: %v", reasons)
}

// sendAdversarial sends the spans in batches from one generator, two
// exports in flight, retrying a batch the collector refuses with
// backpressure (Unavailable, ResourceExhausted).
func sendAdversarial(ctx context.Context, t *testing.T, client ptraceotlp.GRPCClient, spans int) (sentTally, int) {
	tally := sentTally{byOutcome: map[adversarial.Outcome]int{}, malformed: map[string]float64{},
		sampled: map[int64]ptrace.Traces{}, cases: map[int64]adversarial.Case{}}
	sendCtx, stop := context.WithCancel(ctx)
	defer stop()
	batches := make(chan ptrace.Traces, 4)
	generated := make(chan struct{})
	go func() {
		defer close(generated)
		defer close(batches)
		g := adversarial.NewGenerator(1)
		for range spans / adversarialBatch {
			td := g.Batch(adversarialBatch, time.Now())
			adversarial.EachSpan(td, func(res pcommon.Resource, scope pcommon.InstrumentationScope, sp ptrace.Span) {
				c, seq, ok := adversarial.CaseOf(sp)
				assert.True(t, ok, "a generated span names its case")
				tally.byOutcome[c.Outcome]++
				if c.Outcome == adversarial.Malformed {
					tally.malformed["malformed_"+c.Reason]++
				}
				if seq%adversarialSample == 0 {
					tally.sampled[seq] = adversarial.Single(res, scope, sp)
					tally.cases[seq] = c
				}
			})
			select {
			case batches <- td:
			case <-sendCtx.Done():
				return
			}
		}
	}()
	var mu sync.Mutex
	retries := 0
	var failed error
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for td := range batches {
				req := ptraceotlp.NewExportRequestFromTraces(td)
				for {
					_, err := client.Export(sendCtx, req)
					if err == nil {
						break
					}
					if c := status.Code(err); (c == codes.Unavailable || c == codes.ResourceExhausted) && sendCtx.Err() == nil {
						mu.Lock()
						retries++
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						continue
					}
					mu.Lock()
					failed = errors.Join(failed, err)
					mu.Unlock()
					stop()
					return
				}
			}
		})
	}
	wg.Wait()
	stop()
	<-generated
	require.NoError(t, failed, "exports refused other than with backpressure")
	require.NoError(t, ctx.Err(), "sent in time")
	return tally, retries
}
