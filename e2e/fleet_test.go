//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the gateways export gzip-compressed OTLP, as the example says

	"github.com/gpuviz/gpuviz/internal/procs"
)

// The fleet test's agents: two simulated hosts, each with GPUs of its own
// seed, so that a GPU's UUID says which host it is on.
var fleetHosts = []struct {
	name string
	seed int
}{{"gpu-node-a", 1}, {"gpu-node-b", 2}}

const (
	fleetSpanEvery = 50 * time.Millisecond // per host
	fleetDownFor   = 3 * time.Second
	// fleetSettle shortens the gateways' settle window (5 s by default): a
	// span is held for it plus its energy's arrival, and this test is about
	// where spans go, not how they share energy.
	fleetSettle = time.Second
	// fleetMaxHold bounds how long a gateway holds a span: the settle
	// window, then its samples, which arrive each collection interval
	// (1 s), plus the queue and batch on the way (measured: at most 2.4 s
	// while a host stays at its replica); a crash loses at most what
	// arrived within it.
	fleetMaxHold = 5 * time.Second
)

// fleetAgentOverride and fleetGatewayOverride are merged over the example
// files: ports, a 1 s scrape of 4 simulated GPUs, and telemetry to read.
const fleetAgentOverride = `receivers:
  gpuviz:
    collection_interval: 1s
    backend: simulated
    simulated: {model: h200, gpus: 4, seed: %d}
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:%d}
      http: {endpoint: 127.0.0.1:%d}
exporters:
  hostrouting:
    down_for: %v
extensions:
  health_check: {endpoint: 127.0.0.1:%d}
service:
  telemetry:
    metrics:
      level: none
`

const fleetGatewayOverride = `processors:
  gpuviz:
    attribution:
      settle_window: %v
      warmup_wait: 0s # this test times the join, from the first span on
extensions:
  health_check: {endpoint: 127.0.0.1:%d}
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %d}
`

// fleetSpan is a span as a replica's destination received it.
type fleetSpan struct {
	replica  int
	host     string
	gpus     []string // gpuviz.gpu.ids, none when not enriched
	match    string
	received time.Time
}

// fleetSink is where every gateway replica sends: one OTLP/gRPC server per
// replica, recording its spans by span ID and the hosts of its metrics.
type fleetSink struct {
	mu      sync.Mutex
	spans   map[pcommon.SpanID][]fleetSpan // more than one: a duplicate
	metrics []map[string]time.Time         // per replica: host → last GPU metrics
}

type fleetTraces struct {
	ptraceotlp.UnimplementedGRPCServer
	sink    *fleetSink
	replica int
}

type fleetMetrics struct {
	pmetricotlp.UnimplementedGRPCServer
	sink    *fleetSink
	replica int
}

func (s *fleetTraces) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	now := time.Now()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		host, _ := rss.At(i).Resource().Attributes().Get("host.name")
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				sp := spans.At(k)
				if sp.Name() != "llm_request" {
					continue // the processor's phase spans
				}
				r := fleetSpan{replica: s.replica, host: host.AsString(), received: now}
				if v, ok := sp.Attributes().Get("gpuviz.gpu.ids"); ok && v.Type() == pcommon.ValueTypeSlice {
					for _, id := range v.Slice().All() {
						r.gpus = append(r.gpus, id.AsString())
					}
				}
				if v, ok := sp.Attributes().Get("gpuviz.gpu.match"); ok {
					r.match = v.AsString()
				}
				s.sink.spans[sp.SpanID()] = append(s.sink.spans[sp.SpanID()], r)
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

func (s *fleetMetrics) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	rms := req.Metrics().ResourceMetrics()
	for i := range rms.Len() {
		attrs := rms.At(i).Resource().Attributes()
		if _, ok := attrs.Get("gpuviz.backend"); !ok {
			continue // the processor's derived metrics carry it too; both count
		}
		host, _ := attrs.Get("host.name")
		s.sink.metrics[s.replica][host.AsString()] = time.Now()
	}
	return pmetricotlp.NewExportResponse(), nil
}

// serveFleetSink starts one destination per replica and returns their
// addresses.
func serveFleetSink(t *testing.T, replicas int) (*fleetSink, []string) {
	sink := &fleetSink{spans: map[pcommon.SpanID][]fleetSpan{}}
	var addrs []string
	for i := range replicas {
		sink.metrics = append(sink.metrics, map[string]time.Time{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := grpc.NewServer()
		ptraceotlp.RegisterGRPCServer(srv, &fleetTraces{sink: sink, replica: i})
		pmetricotlp.RegisterGRPCServer(srv, &fleetMetrics{sink: sink, replica: i})
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)
		addrs = append(addrs, ln.Addr().String())
	}
	return sink, addrs
}

// metricsReplicas returns the replicas that received host's GPU metrics
// since from.
func (s *fleetSink) metricsReplicas(host string, from time.Time) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for r, hosts := range s.metrics {
		if t, ok := hosts[host]; ok && t.After(from) {
			out = append(out, r)
		}
	}
	return out
}

func (s *fleetSink) snapshot() map[pcommon.SpanID][]fleetSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[pcommon.SpanID][]fleetSpan, len(s.spans))
	for id, rs := range s.spans {
		out[id] = slices.Clone(rs)
	}
	return out
}

// sentSpan is a span the test sent to an agent.
type sentSpan struct {
	host int
	at   time.Time
}

// fleetSender sends each host's agent one vLLM llm_request span every
// fleetSpanEvery, without host.name: the agent stamps it.
type fleetSender struct {
	mu   sync.Mutex
	sent map[pcommon.SpanID]sentSpan
	seq  uint32
}

func (f *fleetSender) run(ctx context.Context, t *testing.T, agents []string) {
	clients := make([]ptraceotlp.GRPCClient, len(agents))
	for i, a := range agents {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		clients[i] = ptraceotlp.NewGRPCClient(conn)
	}
	tick := time.NewTicker(fleetSpanEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for h, c := range clients {
			f.mu.Lock()
			f.seq++
			var id pcommon.SpanID
			id[0] = byte(h)
			binary.BigEndian.PutUint32(id[4:], f.seq)
			f.mu.Unlock()
			end := time.Now().Add(-100 * time.Millisecond)
			td := ptrace.NewTraces()
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", "vllm")
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName("vllm.llm_engine")
			sp := ss.Spans().AppendEmpty()
			sp.SetName("llm_request")
			sp.SetKind(ptrace.SpanKindServer)
			sp.SetTraceID(pcommon.TraceID{0xf1, 0xee, byte(h), id[4], id[5], id[6], id[7]})
			sp.SetSpanID(id)
			sp.SetStartTimestamp(pcommon.NewTimestampFromTime(end.Add(-2 * time.Second)))
			sp.SetEndTimestamp(pcommon.NewTimestampFromTime(end))
			a := sp.Attributes()
			a.PutDouble("gen_ai.latency.time_in_queue", 0.2)
			a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.3)
			a.PutDouble("gen_ai.latency.time_in_model_decode", 1.5)
			a.PutDouble("gen_ai.latency.e2e", 2)
			a.PutInt("gen_ai.usage.prompt_tokens", 512)
			a.PutInt("gen_ai.usage.completion_tokens", 90)
			a.PutStr("gen_ai.request.model", "meta-llama/Llama-3.1-8B-Instruct")
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.Export(sctx, ptraceotlp.NewExportRequestFromTraces(td))
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("agent %d refused a span: %v", h, err)
				}
				continue
			}
			f.mu.Lock()
			f.sent[id] = sentSpan{host: h, at: time.Now()}
			f.mu.Unlock()
		}
	}
}

func (f *fleetSender) snapshot() map[pcommon.SpanID]sentSpan {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[pcommon.SpanID]sentSpan, len(f.sent))
	for id, s := range f.sent {
		out[id] = s
	}
	return out
}

// waitForHosts waits until every host's GPU metrics have reached a
// replica's destination, and two more samples (each GPU's spacing) after.
func (s *fleetSink) waitForHosts(t *testing.T, within time.Duration) {
	t.Helper()
	began := time.Now()
	require.Eventually(t, func() bool {
		for _, h := range fleetHosts {
			if len(s.metricsReplicas(h.name, began)) == 0 {
				return false
			}
		}
		return true
	}, within, 100*time.Millisecond, "every host's GPU metrics reach a gateway")
	time.Sleep(2 * time.Second)
}

// checkJoin checks the sent spans include picks: each arrived exactly
// once, named its host, and was joined at its host's one replica from its
// host's GPUs only. It returns each host's replica, and how many spans
// were checked and enriched.
func checkJoin(t *testing.T, sent map[pcommon.SpanID]sentSpan, got map[pcommon.SpanID][]fleetSpan, include func(sentSpan) bool) (owner map[string]int, total, enriched int) {
	t.Helper()
	owner = map[string]int{}
	for id, s := range sent {
		if !include(s) {
			continue
		}
		rs := got[id]
		if !assert.Len(t, rs, 1, "span %s arrives exactly once", id) {
			continue
		}
		r := rs[0]
		host := fleetHosts[s.host].name
		assert.Equal(t, host, r.host, "the agent stamped its host.name on the span")
		if o, ok := owner[host]; ok {
			assert.Equal(t, o, r.replica, "all of %s's spans are joined at one replica", host)
		}
		owner[host] = r.replica
		total++
		if len(r.gpus) == 0 {
			continue
		}
		enriched++
		assert.Equal(t, "host", r.match)
		for _, g := range r.gpus {
			assert.True(t, strings.HasPrefix(g, fmt.Sprintf("GPU-simulated-h200-%d-", fleetHosts[s.host].seed)),
				"%s's span enriched from %s, a GPU of another host", host, g)
		}
	}
	return owner, total, enriched
}

// holdTimes describes how long the spans that arrived took from the
// sender to a replica's destination: the gateway's hold is most of it.
func holdTimes(sent map[pcommon.SpanID]sentSpan, got map[pcommon.SpanID][]fleetSpan) string {
	var d []time.Duration
	for id, s := range sent {
		if rs := got[id]; len(rs) > 0 {
			d = append(d, rs[0].received.Sub(s.at))
		}
	}
	if len(d) == 0 {
		return "no span arrived"
	}
	slices.Sort(d)
	return fmt.Sprintf("span to destination: median %v, p99 %v, max %v (bound %v)",
		d[len(d)/2].Round(time.Millisecond), d[len(d)*99/100].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond), fleetMaxHold)
}

// fleetGateway is one gateway replica process and how to reach it.
type fleetGateway struct {
	proc             *procs.Proc
	otlp, health, tl int
	env              []string
	override         string
}

// TestFleet runs the gateway-joining topology on loopback from the example
// files (examples/fleet): two agents (two simulated hosts, receiver only)
// route their spans and GPU metrics by host.name (the hostrouting exporter)
// to two gateway replicas running the gpuviz processor. It shows that
// every span is enriched from its own host's GPUs and none from the
// other's, with each host's spans and samples at one replica; that a
// replica shut down gracefully flushes what it holds (nothing lost) while
// its hosts move to the other; and that a replica killed loses at most
// what it held, its hosts moving to the survivor at once. It needs only the
// collector (make build):
//
//	go test -tags e2e -count=1 -run TestFleet -v ./e2e/
func TestFleet(t *testing.T) {
	root, bin := builtCollector(t)
	group, work := collectorGroup(t)

	sink, dests := serveFleetSink(t, 2)
	ports, err := procs.FreePorts(6)
	require.NoError(t, err)
	gateways := make([]*fleetGateway, 2)
	var endpoints []string
	for i := range gateways {
		g := &fleetGateway{otlp: ports[3*i], health: ports[3*i+1], tl: ports[3*i+2]}
		g.env = []string{
			fmt.Sprintf("GPUVIZ_LISTEN=127.0.0.1:%d", g.otlp),
			"GPUVIZ_TRACES_ENDPOINT=" + dests[i], "GPUVIZ_METRICS_ENDPOINT=" + dests[i],
		}
		g.override = filepath.Join(work, fmt.Sprintf("gateway-%d.yaml", i))
		require.NoError(t, os.WriteFile(g.override, fmt.Appendf(nil, fleetGatewayOverride, fleetSettle, g.health, g.tl), 0o644))
		gateways[i] = g
		endpoints = append(endpoints, fmt.Sprintf("127.0.0.1:%d", g.otlp))
	}
	start := func(i int, name string) {
		g := gateways[i]
		p, err := group.SpawnEnv(name, g.env, bin, "--config", filepath.Join(root, "examples/fleet/gateway.yaml"), "--config", g.override)
		require.NoError(t, err)
		require.NoError(t, procs.WaitReady(context.Background(), p, procs.TCPReady(fmt.Sprintf("127.0.0.1:%d", g.otlp))))
		g.proc = p
	}
	start(0, "gateway-0")
	start(1, "gateway-1")

	agentOTLP := spawnAgents(t, group, root, bin, "examples/fleet/agent.yaml",
		func(i, grpc, http, health int) string {
			return fmt.Sprintf(fleetAgentOverride, fleetHosts[i].seed, grpc, http, fleetDownFor, health)
		},
		func(host string) []string {
			return []string{"GPUVIZ_HOST_NAME=" + host, "GPUVIZ_GATEWAYS=[" + strings.Join(endpoints, ", ") + "]"}
		})
	sink.waitForHosts(t, 30*time.Second)

	sender := &fleetSender{sent: map[pcommon.SpanID]sentSpan{}}
	ctx, stopSending := context.WithCancel(context.Background())
	sending := make(chan struct{})
	go func() { defer close(sending); sender.run(ctx, t, agentOTLP) }()
	defer func() { stopSending(); <-sending }()

	// Phase 1, steady: a host's spans and samples meet at one replica, and
	// each span is enriched from its own host's GPUs.
	time.Sleep(15 * time.Second)
	steadyEnd := time.Now()
	time.Sleep(fleetMaxHold)
	got := sink.snapshot()
	owner, total, enriched := checkJoin(t, sender.snapshot(), got, func(s sentSpan) bool { return s.at.Before(steadyEnd) })
	require.Positive(t, total)
	t.Logf("steady: %d spans, %d enriched; owners %v; %s", total, enriched, owner, holdTimes(sender.snapshot(), got))
	assert.GreaterOrEqual(t, float64(enriched), 0.95*float64(total), "spans enriched from their host's GPUs")
	for host, r := range owner {
		assert.Equal(t, []int{r}, sink.metricsReplicas(host, steadyEnd.Add(-3*time.Second)),
			"%s's GPU metrics go to the replica that has its spans", host)
	}

	// Phase 2, a graceful shutdown of the replica holding host a: what it
	// held is flushed, and host a moves to the other replica.
	victim := owner[fleetHosts[0].name]
	survivor := 1 - victim
	stopAt := time.Now()
	require.NoError(t, gateways[victim].proc.Signal(syscall.SIGTERM))
	select {
	case <-gateways[victim].proc.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not shut down within 30 s")
	}
	t.Logf("graceful shutdown of replica %d took %v", victim, time.Since(stopAt))
	time.Sleep(5 * time.Second)
	movedAt := time.Now()
	time.Sleep(fleetMaxHold)
	got = sink.snapshot()
	lost := 0
	for id, s := range sender.snapshot() {
		if s.at.Before(movedAt) && len(got[id]) == 0 {
			lost++
		}
		if s.host == 0 && s.at.After(stopAt.Add(time.Second)) && s.at.Before(movedAt) && len(got[id]) == 1 {
			assert.Equal(t, survivor, got[id][0].replica, "host a's spans go to the survivor while its replica is away")
		}
	}
	t.Logf("graceful: %d lost; %s", lost, holdTimes(sender.snapshot(), got))
	assert.Zero(t, lost, "a graceful shutdown loses nothing")

	// The replica returns; after down_for its hosts return to it.
	start(victim, fmt.Sprintf("gateway-%d-restarted", victim))
	back := time.Now()
	require.Eventually(t, func() bool {
		return slices.Contains(sink.metricsReplicas(fleetHosts[0].name, back), victim)
	}, fleetDownFor+15*time.Second, 100*time.Millisecond, "host a returns to its replica")
	time.Sleep(3 * time.Second)

	// Phase 3, a crash: the replica is killed; it loses at most what it held
	// (spans that arrived within fleetMaxHold of the kill), and its hosts
	// go to the survivor at once.
	pending := telemetryOf(t, gateways[victim].tl).sum("otelcol_processor_gpuviz_pending_spans", "")
	killAt := time.Now()
	require.NoError(t, gateways[victim].proc.Signal(syscall.SIGKILL))
	<-gateways[victim].proc.Done()
	time.Sleep(8 * time.Second)
	stopSending()
	<-sending
	time.Sleep(fleetMaxHold)
	got = sink.snapshot()
	var lostAtKill []time.Duration
	afterKill, afterKillAtSurvivor := 0, 0
	for id, s := range sender.snapshot() {
		if len(got[id]) > 1 {
			t.Errorf("span %s arrived %d times", id, len(got[id]))
		}
		if s.at.After(killAt.Add(time.Second)) {
			afterKill++
			if len(got[id]) == 1 && got[id][0].replica == survivor {
				afterKillAtSurvivor++
			}
		}
		if len(got[id]) == 0 {
			lostAtKill = append(lostAtKill, killAt.Sub(s.at))
		}
	}
	held := float64(fleetMaxHold) / float64(fleetSpanEvery) * float64(len(fleetHosts))
	t.Logf("crash: %s", holdTimes(sender.snapshot(), got))
	t.Logf("crash: %d spans lost (%.0f held by the killed replica a moment before; bound rate × hold = %.0f), sent %v..%v before the kill",
		len(lostAtKill), pending, held, slices.Min(append(lostAtKill, 0)), slices.Max(append(lostAtKill, 0)))
	for _, d := range lostAtKill {
		assert.Less(t, d, fleetMaxHold, "only spans held at the kill are lost")
		assert.Greater(t, d, -time.Second, "no span sent after the kill is lost")
	}
	assert.LessOrEqual(t, float64(len(lostAtKill)), held)
	assert.Positive(t, afterKill, "spans were sent after the kill")
	assert.Equal(t, afterKill, afterKillAtSurvivor, "after the kill every span goes to the survivor")
}
