package view

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func testLimits() Limits {
	return Limits{Retention: 15 * time.Minute, MaxGPUs: 64, MaxRequests: 20000}
}

// answer is the part of /api/v1/view the tests read.
type answer struct {
	Source    string  `json:"source"`
	Simulated bool    `json:"simulated"`
	Now       int64   `json:"now"`
	From      int64   `json:"from"`
	To        int64   `json:"to"`
	StepMS    int64   `json:"step_ms"`
	FinalMS   int64   `json:"final_ms"`
	Time      []int64 `json:"time"`
	GPUs      []struct {
		ID, Host, UUID string
		Index          *int     `json:"index"`
		Name           string   `json:"name"`
		Simulated      bool     `json:"simulated"`
		MemoryTotal    *float64 `json:"memory_total_bytes"`
		PowerLimit     *float64 `json:"power_limit_w"`
	} `json:"gpus"`
	Series map[string]map[string]struct {
		Min, Max, Mean []*float64
	} `json:"series"`
	Labels      map[string][]*string `json:"labels"`
	RequestsSeq uint64               `json:"requests_seq"`
	Requests    []struct {
		Seq        uint64   `json:"seq"`
		TraceID    string   `json:"trace_id"`
		SpanID     string   `json:"span_id"`
		GPUs       []string `json:"gpus"`
		Start, End int64
		Bottleneck *string  `json:"bottleneck"`
		Share      *float64 `json:"bottleneck_share"`
		Energy     *float64 `json:"energy_j"`
		Phases     []struct {
			Name       string
			Start, End int64
			Bottleneck *string  `json:"bottleneck"`
			Share      *float64 `json:"bottleneck_share"`
			Energy     *float64 `json:"energy_j"`
		} `json:"phases"`
	} `json:"requests"`
	Summary struct {
		Share     map[string]float64 `json:"bottleneck_share"`
		PerReq    map[string]float64 `json:"energy_per_request_j"`
		Requests  int                `json:"requests"`
		Anomalies []struct {
			GPU, Kind, Text string
			Since           int64
		} `json:"anomalies"`
	} `json:"summary"`
}

func query(t testing.TB, r *Registry, target string) (int, answer, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler(fstest.MapFS{"index.html": {Data: []byte("<html>")}}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	var a answer
	if rec.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a), rec.Body.String())
	}
	return rec.Code, a, rec.Body.String()
}

func TestSizes(t *testing.T) {
	// docs/view.md gives the bound from these sizes.
	assert.EqualValues(t, 16, unsafe.Sizeof(bucket{}))
	assert.EqualValues(t, 18, unsafe.Sizeof(labelSlot{}))
	assert.EqualValues(t, 336, unsafe.Sizeof(record{}))
	perSecond := int(NumSignals)*int(unsafe.Sizeof(bucket{})) + int(unsafe.Sizeof(labelSlot{})) + 8
	assert.Equal(t, 250, perSecond, "bytes per GPU-second")

	// Measured: 64 GPUs at the default retention.
	s := newSource("m", testLimits(), time.Now)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 64 {
		s.GPU("host", fmt.Sprintf("GPU-%02d", i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perGPU := float64(after.HeapAlloc-before.HeapAlloc) / 64
	assert.InDelta(t, 901*250, perGPU, 0.1*901*250, "documented per-GPU bytes (docs/view.md)")
	runtime.KeepAlive(s)
}

func TestColumnsKeepPeaks(t *testing.T) {
	now := t0.Add(10 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "GPU-a")
	g.SetInfo(3, "NVIDIA H200")
	g.SetSimulated(true)
	g.SetMemoryTotal(150e9)
	g.SetPowerLimit(700)
	// Power at 4 Hz over the last 10 minutes: 300 W, one 690 W spike.
	spike := now.Add(-100*time.Second - 250*time.Millisecond)
	for ts := now.Add(-10 * time.Minute); ts.Before(now); ts = ts.Add(250 * time.Millisecond) {
		v := 300.0
		if ts.Equal(spike) {
			v = 690
		}
		g.Add(Power, ts.UnixNano(), v)
	}
	// 900 s in 60 columns: 15 s each.
	code, a, body := query(t, r, "/api/v1/view?range=900&columns=60")
	require.Equal(t, http.StatusOK, code, body)
	assert.EqualValues(t, 15000, a.StepMS)
	assert.True(t, a.Simulated)
	require.Len(t, a.GPUs, 1)
	assert.Equal(t, 3, *a.GPUs[0].Index)
	assert.Equal(t, 700.0, *a.GPUs[0].PowerLimit)
	for i, ts := range a.Time {
		assert.Zero(t, ts%15000, "columns align to step")
		if i > 0 {
			assert.Equal(t, a.Time[i-1]+15000, ts)
		}
	}
	ser := a.Series["h/GPU-a"]
	require.Contains(t, ser, "power_w")
	assert.NotContains(t, ser, "temperature_c", "a signal never reported is absent")
	p := ser["power_w"]
	require.Len(t, p.Max, len(a.Time))
	peaks := 0
	for c := range a.Time {
		if p.Max[c] == nil {
			continue
		}
		if *p.Max[c] == 690 {
			peaks++
			assert.Equal(t, 300.0, *p.Min[c])
			assert.InDelta(t, 300+390.0/60, *p.Mean[c], 0.01, "mean over the column's 60 samples")
		} else {
			assert.Equal(t, 300.0, *p.Max[c])
		}
	}
	assert.Equal(t, 1, peaks, "the spike survives downsampling")
}

func TestRetentionBoundsTheStore(t *testing.T) {
	lim := testLimits()
	lim.Retention = time.Minute
	now := t0
	r := NewRegistry(lim, "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "GPU-a")
	for i := range 600 {
		g.Add(Utilization, t0.Add(time.Duration(i)*time.Second).UnixNano(), 0.5)
	}
	now = t0.Add(600 * time.Second)
	g.Add(Utilization, t0.UnixNano(), 1) // ten minutes late
	assert.EqualValues(t, 1, r.Dropped().SamplesTooOld)
	code, _, body := query(t, r, "/api/v1/view?range=61")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "range:")
	code, a, _ := query(t, r, "/api/v1/view?range=60&columns=60")
	require.Equal(t, http.StatusOK, code)
	n := 0
	for _, v := range a.Series["h/GPU-a"]["utilization"].Mean {
		if v != nil {
			n++
			assert.Equal(t, 0.5, *v)
		}
	}
	assert.Equal(t, 60, n, "the ring holds the retention")
	assert.Len(t, g.secs, 61)
}

func TestGPULimitRefusesAndCounts(t *testing.T) {
	lim := testLimits()
	lim.MaxGPUs, lim.Retention = 2, time.Minute
	now := t0
	r := NewRegistry(lim, "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	a, b := s.GPU("h", "a"), s.GPU("h", "b")
	require.NotNil(t, a)
	require.NotNil(t, b)
	a.Add(Power, t0.UnixNano(), 1)
	b.Add(Power, t0.UnixNano(), 1)
	assert.Nil(t, s.GPU("h", "c"))
	assert.Nil(t, s.GPU("h", "d"))
	assert.Same(t, a, s.GPU("h", "a"))
	assert.EqualValues(t, 2, r.Dropped().GPUs)
	assert.Equal(t, 2, r.GPUs())
	// b goes quiet for the whole retention while a reports: c may take
	// its place.
	a.Add(Power, t0.Add(2*time.Minute).UnixNano(), 1)
	c := s.GPU("h", "c")
	require.NotNil(t, c)
	assert.NotSame(t, b, c)
	assert.Equal(t, 2, r.GPUs())
	assert.Contains(t, string(r.AppendSources(nil)), `"refused":{"gpus":2,`)
	// Both go quiet at once (a fleet redeployed under new names): by the
	// view's clock, a new GPU takes the place of the one silent longest.
	c.Add(Power, t0.Add(2*time.Minute).UnixNano(), 1)
	now = t0.Add(2*time.Minute + 30*time.Second)
	assert.Nil(t, s.GPU("h2", "d"), "both reported within the retention")
	now = t0.Add(4 * time.Minute)
	d := s.GPU("h2", "d")
	require.NotNil(t, d, "the view's clock says both have been silent for the retention")
	assert.Equal(t, 2, r.GPUs())
}

func TestRequestRing(t *testing.T) {
	lim := testLimits()
	lim.MaxRequests = 100
	now := t0.Add(5 * time.Minute)
	r := NewRegistry(lim, "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	for i := range 250 {
		start := t0.Add(time.Duration(i) * time.Second).UnixNano()
		req := Request{GPUs: []*GPU{g}, Family: "vllm", Model: "m", Start: start, End: start + int64(time.Second),
			Bottleneck: "memory_bound", Share: 0.8, Energy: float64(i), EnergyKnown: true, NumPhases: 2, InputTokens: -1, OutputTokens: 10}
		req.TraceID[0], req.SpanID[0] = byte(i), byte(i)
		req.Phases[0] = Phase{Name: "queue", Start: start, End: start + 1e8, Bottleneck: "idle", Share: math.NaN()}
		req.Phases[1] = Phase{Name: "decode", Start: start + 1e8, End: start + 1e9, Bottleneck: "memory_bound", Share: 2.0 / 3, Energy: float64(i)}
		s.AddRequest(&req)
	}
	assert.EqualValues(t, 150, r.Dropped().RequestsOverwritten)
	code, a, body := query(t, r, "/api/v1/view?range=300")
	require.Equal(t, http.StatusOK, code, body)
	assert.EqualValues(t, 250, a.RequestsSeq)
	require.Len(t, a.Requests, 100, "the ring keeps max_requests")
	assert.EqualValues(t, 151, a.Requests[0].Seq)
	assert.EqualValues(t, 250, a.Requests[99].Seq)
	assert.Len(t, a.Requests[0].Phases, 2)
	require.NotNil(t, a.Requests[0].Share)
	assert.Equal(t, 0.8, *a.Requests[0].Share)
	assert.Nil(t, a.Requests[0].Phases[0].Share, "an unknown share is null")
	require.NotNil(t, a.Requests[0].Phases[1].Share)
	assert.Equal(t, 0.667, *a.Requests[0].Phases[1].Share, "to three decimals")
	assert.Len(t, a.Requests[0].TraceID, 32)
	assert.Len(t, a.Requests[0].SpanID, 16)
	assert.Equal(t, 100, a.Summary.Requests)
	assert.Equal(t, 199.0, a.Summary.PerReq["p50"])

	_, inc, _ := query(t, r, "/api/v1/view?range=300&requests_after=240")
	require.Len(t, inc.Requests, 10)
	assert.EqualValues(t, 241, inc.Requests[0].Seq)
	_, none, _ := query(t, r, "/api/v1/view?range=300&requests_after=250")
	assert.Empty(t, none.Requests)
}

func TestBadParametersNameThemselves(t *testing.T) {
	r := NewRegistry(testLimits(), "", time.Now)
	code, _, _ := query(t, r, "/api/v1/view")
	assert.Equal(t, http.StatusNotFound, code, "no source registered")
	r.RegisterSource("gpuviz")
	for param, target := range map[string]string{
		"range":          "/api/v1/view?range=10",
		"range ":         "/api/v1/view?range=901",
		"range  ":        "/api/v1/view?range=abc",
		"columns":        "/api/v1/view?columns=4001",
		"columns ":       "/api/v1/view?columns=9",
		"since":          "/api/v1/view?since=yesterday",
		"requests_after": "/api/v1/view?requests_after=-1",
		"source":         "/api/v1/view?source=nope",
	} {
		assert.Contains(t, badRequest(t, r, target), param[:len(param)-countSpaces(param)]+":", target)
	}
	rec := httptest.NewRecorder()
	r.Handler(fstest.MapFS{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/view", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// A query that does not parse is refused, not answered as if the pairs
// that did not parse were absent (url.URL.Query drops them).
func TestAMalformedQueryIsRefused(t *testing.T) {
	r := NewRegistry(testLimits(), "", time.Now)
	r.RegisterSource("gpuviz")
	for _, target := range []string{
		"/api/v1/view?range=%zz",
		"/api/v1/view?range=60;columns=10",
		"/api/v1/view?columns=10&since=%",
	} {
		e := badRequest(t, r, target)
		assert.True(t, strings.HasPrefix(e, "query: "), "%s: %s", target, e)
	}
}

// A parameter that is not one of /api/v1/view's, or one given twice, is
// refused, naming it, not answered with the default or the first value.
func TestUnknownAndRepeatedParametersAreRefused(t *testing.T) {
	r := NewRegistry(testLimits(), "", time.Now)
	r.RegisterSource("gpuviz")
	for target, want := range map[string]string{
		"/api/v1/view?rnage=60":                     `"rnage": no such parameter`,
		"/api/v1/view?range=60&column=100":          `"column": no such parameter`,
		"/api/v1/view?range=60&range=900":           "range: given 2 times",
		"/api/v1/view?columns=10&columns=&range=60": "columns: given 2 times",
	} {
		e := badRequest(t, r, target)
		assert.True(t, strings.HasPrefix(e, want), "%s: %s", target, e)
	}
	code, _, body := query(t, r, "/api/v1/view?source=gpuviz&range=60&columns=60&since=0&requests_after=0")
	assert.Equal(t, http.StatusOK, code, body)
}

// /assets/ serves the page's files, not a listing of them.
func TestAssetsAreServedNotListed(t *testing.T) {
	h := NewRegistry(testLimits(), "", time.Now).Handler(fstest.MapFS{
		"index.html": {Data: []byte("<html>")}, "assets/app.js": {Data: []byte("x")}, "assets/sub/a.css": {Data: []byte("y")}})
	for target, want := range map[string]int{
		"/assets/app.js":    http.StatusOK,
		"/assets/sub/a.css": http.StatusOK,
		"/assets/":          http.StatusNotFound,
		"/assets/sub/":      http.StatusNotFound,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		assert.Equal(t, want, rec.Code, target)
		assert.NotContains(t, rec.Body.String(), "app.js", target)
	}
}

// HEAD is answered as GET is, without the body (curl -I, uptime checks);
// other methods are refused with Allow naming both.
func TestHeadIsAnsweredAsGet(t *testing.T) {
	r := NewRegistry(testLimits(), "", time.Now)
	s, _ := r.RegisterSource("gpuviz")
	s.GPU("h", "GPU-0")
	srv := httptest.NewServer(r.Handler(fstest.MapFS{"index.html": {Data: []byte("<html>")}, "assets/app.js": {Data: []byte("x")}}))
	defer srv.Close()
	for path, ctype := range map[string]string{
		"/": "text/html", "/assets/app.js": "javascript", "/api/v1/sources": "application/json",
		"/api/v1/view?range=60": "application/json",
	} {
		resp, err := http.Head(srv.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, resp.Header.Get("Content-Type"), ctype, path)
		assert.Empty(t, b, path)
	}
	resp, err := http.Post(srv.URL+"/api/v1/view", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
}

func countSpaces(s string) int {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == ' '; i-- {
		n++
	}
	return n
}

func TestLabelsAndAnomalies(t *testing.T) {
	now := t0.Add(2 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	g.SetInfo(2, "")
	for ts := t0; ts.Before(now); ts = ts.Add(100 * time.Millisecond) {
		l := "memory_bound"
		if ts.Sub(t0)%time.Second >= 700*time.Millisecond {
			l = "compute_bound"
		}
		g.Label(ts.UnixNano(), int64(100*time.Millisecond), l)
		g.Add(PowerThrottled, ts.UnixNano(), 0.5)
	}
	_, a, _ := query(t, r, "/api/v1/view?range=60&columns=60")
	labels := a.Labels["h/a"]
	require.Len(t, labels, len(a.Time))
	for _, l := range labels[:len(labels)-1] {
		require.NotNil(t, l)
		assert.Equal(t, "memory_bound", *l, "the label holding the column longest")
	}
	assert.InDelta(t, 0.7, a.Summary.Share["memory_bound"], 0.01)
	assert.InDelta(t, 0.3, a.Summary.Share["compute_bound"], 0.01)
	require.Len(t, a.Summary.Anomalies, 1)
	assert.Equal(t, "power_throttled", a.Summary.Anomalies[0].Kind)
	assert.Equal(t, "GPU 2 power-throttled 50% of the last minute", a.Summary.Anomalies[0].Text)
	assert.Equal(t, now.UnixMilli(), a.FinalMS, "labels are in up to now")
}

func TestRelabelMovesTimeAndFinalizedHoldsFinalMS(t *testing.T) {
	now := t0.Add(2 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	for ts := t0; ts.Before(now); ts = ts.Add(100 * time.Millisecond) {
		g.Label(ts.UnixNano(), 1e8, "idle")
	}
	// Final: 0.4 s of every second host_bound; a relabel that names a
	// label the bins do not hold moves nothing.
	final := t0.Add(time.Minute)
	for ts := t0; ts.Before(final); ts = ts.Add(time.Second) {
		g.Relabel(ts.UnixNano(), 4e8, "idle", "host_bound")
		g.Relabel(ts.UnixNano(), 4e8, "compute_bound", "memory_bound")
	}
	g.Finalized(final.UnixNano())

	_, a, _ := query(t, r, "/api/v1/view?range=120&columns=120")
	assert.InDelta(t, 0.2, a.Summary.Share["host_bound"], 0.01, "0.4 s a second over half the range")
	assert.InDelta(t, 0.8, a.Summary.Share["idle"], 0.01)
	assert.Zero(t, a.Summary.Share["memory_bound"])
	assert.Equal(t, final.UnixMilli(), a.FinalMS, "final where the source said, not at the newest label")
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	now := t0.Add(time.Minute)
	var mu sync.Mutex
	r := NewRegistry(testLimits(), "", func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	s, _ := r.RegisterSource("gpuviz")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				g := s.GPU("h", fmt.Sprintf("GPU-%d", (w+i)%8))
				ts := t0.Add(time.Duration(i) * 10 * time.Millisecond).UnixNano()
				g.Add(Signal(i%int(NumSignals)), ts, float64(i))
				g.Label(ts, 1e8, "idle")
				if i%50 == 0 {
					s.AddRequest(&Request{GPUs: []*GPU{g}, Start: ts, End: ts + 1e9, NumPhases: 0})
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				code, _, body := query(t, r, "/api/v1/view?range=60&columns=60")
				assert.Equal(t, http.StatusOK, code, body)
			}
		}()
	}
	wg.Wait()
	_, a, _ := query(t, r, "/api/v1/view?range=60")
	assert.Len(t, a.GPUs, 8)
	assert.EqualValues(t, 160, a.RequestsSeq)
}

func TestSinceReturnsTheNewestColumns(t *testing.T) {
	now := t0.Add(5*time.Minute + 500*time.Millisecond)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	for ts := t0; ts.Before(now); ts = ts.Add(time.Second) {
		g.Add(Power, ts.UnixNano(), float64(ts.Unix()%100))
	}
	_, full, _ := query(t, r, "/api/v1/view?range=300&columns=300")
	last := full.Time[len(full.Time)-1]
	_, inc, _ := query(t, r, fmt.Sprintf("/api/v1/view?range=300&columns=300&since=%d", last-3000))
	require.Equal(t, []int64{last - 3000, last - 2000, last - 1000, last}, inc.Time)
	fp, ip := full.Series["h/a"]["power_w"], inc.Series["h/a"]["power_w"]
	for i := range inc.Time {
		assert.Equal(t, *fp.Mean[len(full.Time)-4+i], *ip.Mean[i])
	}
	_, future, _ := query(t, r, fmt.Sprintf("/api/v1/view?since=%d", last+60000))
	assert.Equal(t, []int64{last}, future.Time, "the newest column is always sent")
	assert.False(t, math.IsNaN(float64(inc.Now)))
}

func BenchmarkAdd(b *testing.B) {
	s := newSource("b", testLimits(), time.Now)
	g := s.GPU("h", "a")
	ts := t0.UnixNano()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		g.Add(Signal(i%int(NumSignals)), ts+int64(i)*int64(20*time.Millisecond), 0.5)
	}
}

func BenchmarkLabel(b *testing.B) {
	s := newSource("b", testLimits(), time.Now)
	g := s.GPU("h", "a")
	ts := t0.UnixNano()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		g.Label(ts+int64(i)*1e8, 1e8, "memory_bound")
	}
}

func BenchmarkAddRequest(b *testing.B) {
	s := newSource("b", testLimits(), time.Now)
	gs := []*GPU{s.GPU("h", "a"), s.GPU("h", "b")}
	req := Request{GPUs: gs, Model: "llama", Family: "vllm", NumPhases: 3}
	req.Phases[0].Name, req.Phases[1].Name, req.Phases[2].Name = "queue", "prefill", "decode"
	b.ReportAllocs()
	for b.Loop() {
		s.AddRequest(&req)
	}
}

// fullSource is 8 GPUs with every signal at 4 Hz and labels every 100 ms
// over 15 minutes, and 20000 requests on them.
func fullSource(b *testing.B) (*Registry, time.Time) {
	now := t0.Add(15 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	var gs []*GPU
	for i := range 8 {
		g := s.GPU("h", fmt.Sprintf("GPU-%d", i))
		g.SetInfo(i, "NVIDIA H200")
		g.SetMemoryTotal(150e9)
		gs = append(gs, g)
		for ts := t0; ts.Before(now); ts = ts.Add(250 * time.Millisecond) {
			for sig := range NumSignals {
				g.Add(sig, ts.UnixNano(), float64(ts.UnixMilli()%1000)/1000)
			}
			g.Label(ts.UnixNano(), 1e8, labelNames[ts.UnixMilli()/250%int64(numLabels)])
		}
	}
	for i := range 20000 {
		start := t0.Add(time.Duration(i) * 45 * time.Millisecond).UnixNano()
		req := Request{GPUs: gs[i%8 : i%8+1], Family: "vllm", Model: "m", Start: start, End: start + 5e9, Bottleneck: "memory_bound",
			Energy: float64(i % 500), EnergyKnown: true, PerToken: 0.3, InputTokens: 800, OutputTokens: 130, NumPhases: 3}
		req.Phases[0] = Phase{Name: "queue", Start: start, End: start + 1e8}
		req.Phases[1] = Phase{Name: "prefill", Start: start + 1e8, End: start + 3e8}
		req.Phases[2] = Phase{Name: "decode", Start: start + 3e8, End: start + 5e9}
		s.AddRequest(&req)
	}
	return r, now
}

func benchmarkView(b *testing.B, target func(now time.Time) string) {
	r, now := fullSource(b)
	h := r.Handler(fstest.MapFS{})
	req := httptest.NewRequest(http.MethodGet, target(now), nil)
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Body.String())
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "response_bytes")
}

// BenchmarkViewFull is the page's first fetch of 15 minutes of 8 GPUs.
func BenchmarkViewFull(b *testing.B) {
	benchmarkView(b, func(time.Time) string { return "/api/v1/view?range=900&columns=900" })
}

// BenchmarkViewIncremental is the page's once-a-second refresh: the last
// 30 s of columns and the requests since the last second.
func BenchmarkViewIncremental(b *testing.B) {
	benchmarkView(b, func(now time.Time) string {
		return fmt.Sprintf("/api/v1/view?range=900&columns=900&since=%d&requests_after=%d", now.Add(-30*time.Second).UnixMilli(), 19980)
	})
}

func TestAnomalyAtItsThresholdHasItsSince(t *testing.T) {
	// NVML reads temperature in whole °C: a GPU at 85 °C is hot, and
	// the anomaly starts at its first second there, not before 1970; a
	// throttled share's, at its first second throttled at all.
	now := t0.Add(2 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	g.SetInfo(0, "")
	g.SetMemoryTotal(1000)
	hotFrom := now.Add(-20 * time.Second).Truncate(time.Second)
	for ts := t0; ts.Before(now); ts = ts.Add(time.Second) {
		temp, mem, throttled := 70.0, 500.0, 0.0
		if !ts.Before(hotFrom) {
			temp, mem, throttled = anomalyTemperature, anomalyMemoryShare*1000, 1
		}
		g.Add(Temperature, ts.UnixNano(), temp)
		g.Add(MemoryUsed, ts.UnixNano(), mem)
		g.Add(PowerThrottled, ts.UnixNano(), throttled)
	}
	_, a, _ := query(t, r, "/api/v1/view?range=60")
	kinds := map[string]int64{}
	for _, an := range a.Summary.Anomalies {
		kinds[an.Kind] = an.Since
	}
	assert.Equal(t, map[string]int64{"hot": hotFrom.UnixMilli(), "memory_full": hotFrom.UnixMilli(), "power_throttled": hotFrom.UnixMilli()}, kinds)
}

// At most maxAnswers view answers are built at once: a request past them
// waits for a slot, and one that ends while waiting builds nothing.
func TestViewAnswersAreBuiltAFewAtATime(t *testing.T) {
	now := t0.Add(time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	s.GPU("h", "GPU-0").Add(0, t0.UnixNano(), 1)
	h := r.Handler(fstest.MapFS{})
	for range maxAnswers { // every slot taken, as by answers being built
		r.answering <- struct{}{}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/view", nil).WithContext(ctx))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.JSONEq(t, `{"error":"the request ended while other view answers were being built"}`, rec.Body.String(),
		"a request that ended while waiting gets no answer built")

	waiting := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/view", nil))
		waiting <- rec
	}()
	<-r.answering // one answer done: the waiting request takes its slot
	rec = <-waiting
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Len(t, r.answering, maxAnswers-1, "the answered request gave its slot back")
}

// badRequest asks r for target, requires a 400, and returns its error.
func badRequest(t *testing.T, r *Registry, target string) string {
	t.Helper()
	code, _, body := query(t, r, target)
	assert.Equal(t, http.StatusBadRequest, code, target)
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error
}
