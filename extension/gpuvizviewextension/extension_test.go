package gpuvizviewextension

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/internal/viewcheck"
)

func startView(t *testing.T) (*viewExtension, string) {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.NetAddr.Endpoint = "127.0.0.1:0"
	cfg.TraceURLTemplate = "http://127.0.0.1:16686/trace/{trace_id}"
	ext, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(typ), cfg)
	require.NoError(t, err)
	require.NoError(t, ext.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, ext.Shutdown(context.Background())) })
	e := ext.(*viewExtension)
	return e, "http://" + e.addr
}

func get(t *testing.T, method, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

func TestServesPageAndAPI(t *testing.T) {
	e, base := startView(t)
	var _ view.Registrar = e

	code, h, body := get(t, http.MethodGet, base+"/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, h.Get("Content-Type"), "text/html")
	assert.Contains(t, string(body), "<html")
	index, err := assets().Open("index.html")
	require.NoError(t, err)
	want, _ := io.ReadAll(index)
	assert.Equal(t, string(want), string(body), "/ is the embedded index.html")

	entries, err := fsReadDir("assets")
	require.NoError(t, err)
	require.NotEmpty(t, entries, "web/dist/assets holds the page's code")
	for _, name := range entries {
		code, _, _ := get(t, http.MethodGet, base+"/assets/"+name)
		assert.Equal(t, http.StatusOK, code, name)
	}

	// No source yet: the view says so.
	code, _, body = get(t, http.MethodGet, base+"/api/v1/view")
	assert.Equal(t, http.StatusNotFound, code, string(body))
	assert.Contains(t, string(body), `"error"`)

	src, release := e.RegisterSource("gpuviz/edge")
	g := src.GPU("host-a", "GPU-1")
	g.SetSimulated(true)
	code, _, body = get(t, http.MethodGet, base+"/api/v1/sources")
	require.Equal(t, http.StatusOK, code)
	var sources struct {
		Sources []struct {
			ID        string `json:"id"`
			Simulated bool   `json:"simulated"`
			GPUs      int    `json:"gpus"`
		} `json:"sources"`
		TraceURL string `json:"trace_url_template"`
	}
	require.NoError(t, json.Unmarshal(body, &sources))
	require.Len(t, sources.Sources, 1)
	assert.Equal(t, "gpuviz/edge", sources.Sources[0].ID)
	assert.True(t, sources.Sources[0].Simulated)
	assert.Equal(t, 1, sources.Sources[0].GPUs)
	assert.Equal(t, "http://127.0.0.1:16686/trace/{trace_id}", sources.TraceURL)

	code, _, body = get(t, http.MethodGet, base+"/api/v1/view?source=gpuviz/edge")
	require.Equal(t, http.StatusOK, code, string(body))
	assert.True(t, json.Valid(body))

	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, p := range []string{"/", "/api/v1/view", "/api/v1/sources"} {
			code, h, _ := get(t, m, base+p)
			assert.Equal(t, http.StatusMethodNotAllowed, code, m+" "+p)
			assert.Equal(t, "GET, HEAD", h.Get("Allow"))
		}
	}
	code, _, _ = get(t, http.MethodGet, base+"/api/v2/nothing")
	assert.Equal(t, http.StatusNotFound, code)
	code, _, _ = get(t, http.MethodGet, base+"/nothing.html")
	assert.Equal(t, http.StatusNotFound, code)

	release()
	code, _, body = get(t, http.MethodGet, base+"/api/v1/sources")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `"sources":[]`)
}

func TestStartFailsOnATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cfg := createDefaultConfig()
	cfg.NetAddr.Endpoint = ln.Addr().String()
	ext, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(typ), cfg)
	require.NoError(t, err)
	err = ext.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "address already in use"), err.Error())
	require.NoError(t, ext.Shutdown(context.Background()))
}

func fsReadDir(dir string) ([]string, error) {
	entries, err := fs.ReadDir(assets(), dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// fakeAPI stands in for /api/v1 behind the embedded page: one source
// (source, "fake" when empty) of one GPU whose view follows docs/view.md (columns of step_ms
// from range and columns, `since` and `requests_after` honoured), and the
// requests the test puts in. views counts the view requests; the one
// numbered hangViewAt is never answered. noSource answers /api/v1/sources with none,
// each answer held for hold; inflight and most count the sources requests
// being answered.
type fakeAPI struct {
	mu             sync.Mutex
	source         string
	views          int
	hangViewAt     int
	noSource       bool
	hold           time.Duration
	inflight, most int
	arrived        chan struct{}
	seq            uint64
	requests       []map[string]any
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api/v1/sources":
		f.mu.Lock()
		f.inflight++
		f.most = max(f.most, f.inflight)
		none, hold, arrived, id := f.noSource, f.hold, f.arrived, cmp.Or(f.source, "fake")
		f.mu.Unlock()
		if arrived != nil {
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
		time.Sleep(hold)
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
		if none {
			fmt.Fprint(w, `{"sources":[]}`)
			return
		}
		fmt.Fprintf(w, `{"sources":[{"id":%q,"gpus":1}]}`, id)
	case "/api/v1/view":
		f.mu.Lock()
		f.views++
		hang := f.views == f.hangViewAt
		f.mu.Unlock()
		if hang {
			<-r.Context().Done() // until the page gives up, or the test ends
			return
		}
		q := r.URL.Query()
		num := func(k string, def int64) int64 {
			v, err := strconv.ParseInt(q.Get(k), 10, 64)
			if err != nil {
				return def
			}
			return v
		}
		rng, cols := num("range", 300), num("columns", 600)
		step := max(1000, (rng*1000/cols+999)/1000*1000)
		now := time.Now().UnixMilli()
		from, last := (now-rng*1000)/step*step, now/step*step
		start := from
		if s := num("since", -1); s >= 0 {
			start = min(max((s+step-1)/step*step, from), last)
		}
		var ts []int64
		var vals []float64
		var labels []string
		for t := start; t <= last; t += step {
			ts, vals, labels = append(ts, t), append(vals, 0.5), append(labels, "compute_bound")
		}
		f.mu.Lock()
		after := num("requests_after", -1)
		reqs := []map[string]any{}
		for _, rq := range f.requests {
			if int64(rq["seq"].(uint64)) > after {
				reqs = append(reqs, rq)
			}
		}
		seq, id := f.seq, cmp.Or(f.source, "fake")
		f.mu.Unlock()
		b, _ := json.Marshal(map[string]any{
			"source": id, "now": now, "from": from, "to": now, "step_ms": step, "final_ms": last,
			"gpus":     []map[string]any{{"id": "GPU-0", "uuid": "GPU-0", "index": 0, "name": "H100", "memory_total_bytes": 80e9, "power_limit_w": 700}},
			"time":     ts,
			"series":   map[string]any{"GPU-0": map[string]any{"utilization": map[string]any{"min": vals, "max": vals, "mean": vals}}},
			"labels":   map[string]any{"GPU-0": labels},
			"requests": reqs, "requests_seq": seq, "summary": map[string]any{},
		})
		_, _ = w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// setRequests replaces the fake's requests with n new ones numbered from
// 1 (a source registered anew starts its sequence again), their trace ids
// starting with prefix.
func (f *fakeAPI) setRequests(prefix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now().UnixMilli()
	f.requests = nil
	for i := 1; i <= n; i++ {
		f.requests = append(f.requests, map[string]any{
			"seq": uint64(i), "trace_id": fmt.Sprintf("%s%030d", prefix, i), "span_id": "0000000000000001", "gpus": []string{"GPU-0"},
			"model": "m", "start": now - 20000 + int64(i)*1000, "end": now - 10000 + int64(i)*1000, "bottleneck": "compute_bound",
			"phases": []map[string]any{{"name": "prefill", "start": now - 20000 + int64(i)*1000, "end": now - 15000, "bottleneck": "compute_bound"},
				{"name": "decode", "start": now - 15000, "end": now - 10000 + int64(i)*1000, "bottleneck": "compute_bound"}},
		})
	}
	f.seq = uint64(n)
}

// openPage serves the embedded page with api behind /api/ and opens it in
// headless Chromium at fragment (as "#range=900").
func openPage(t *testing.T, api http.Handler, fragment string) *viewcheck.Browser {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		const why = "no Chromium at /usr/bin/chromium (make chromium installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", api)
	mux.Handle("/", http.FileServerFS(assets()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	// Chromium's socket path in TMPDIR must stay under 107 bytes.
	tmp, err := os.MkdirTemp("", "gv")
	require.NoError(t, err)
	t.Setenv("TMPDIR", tmp)
	b, err := viewcheck.NewBrowser(ctx, "/usr/bin/chromium")
	require.NoError(t, err)
	t.Cleanup(func() { b.Close(); _ = os.RemoveAll(tmp) })
	require.NoError(t, b.Open(srv.URL+"/"+fragment))
	return b
}

// A page that finds no source polls for one every 2 s. The hash changing
// (or the range, or the source) while it is asking started a second loop
// beside the first: the first, back from its question, re-armed its timer
// though restart had moved on, so each change added one more loop polling
// the collector, for as long as the page stayed open.
func TestAPageWithNoSourceKeepsOnePollingLoop(t *testing.T) {
	f := &fakeAPI{noSource: true, hold: 1500 * time.Millisecond, arrived: make(chan struct{}, 1)}
	b := openPage(t, f, "")
	for i := range 2 { // init's question, then the first poll's
		select {
		case <-f.arrived:
		case <-time.After(30 * time.Second):
			t.Fatalf("question %d for the sources never came", i+1)
		}
	}
	_, err := b.Eval(`location.hash = "#range=600"; true`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.inflight == 0 }, 30*time.Second, 50*time.Millisecond)
	f.mu.Lock()
	f.most = 0
	f.mu.Unlock()
	time.Sleep(8 * time.Second) // two rounds of 2 s and 1.5 s answers
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, 1, f.most, "questions for the sources at once: loops polling")
}

// A source registered anew (the collector restarted, or reloaded its
// config) numbers its requests from 1 again. The page went on asking for
// requests after the old source's newest, so it missed those the new one
// recorded before its first answer, and kept the old requests' bars under
// the new numbers; it now starts the requests over when the sequence goes
// back.
func TestARestartedSourceShowsItsRequests(t *testing.T) {
	f := &fakeAPI{}
	f.setRequests("aaaa", 5)
	bars := barCounter(openPage(t, f, "#range=300"))
	require.Eventually(t, func() bool { return bars("aaaa") == "5" }, 30*time.Second, 100*time.Millisecond)
	f.setRequests("bbbb", 3)
	assert.Eventually(t, func() bool { return bars("bbbb") == "3" && bars("aaaa") == "0" }, 15*time.Second, 100*time.Millisecond,
		"the restarted source's requests (bbbb…) are not drawn, or the old ones (aaaa…) stay")
}

// The source the page shows goes away and another takes its place (a
// gateway replica's processor gone, another's registered): the page's
// refresh of the sources, every 15 s, picks the other, and must fetch its
// history from the start, not its increments after the old one's newest
// column and request.
func TestAnotherSourceIsFetchedFromTheStart(t *testing.T) {
	f := &fakeAPI{source: "a"}
	f.setRequests("aaaa", 5)
	bars := barCounter(openPage(t, f, "#range=300"))
	require.Eventually(t, func() bool { return bars("aaaa") == "5" }, 30*time.Second, 100*time.Millisecond)
	f.mu.Lock()
	f.source = "b"
	f.mu.Unlock()
	f.setRequests("bbbb", 5) // numbered as the old source's were: no sequence goes back
	assert.Eventually(t, func() bool { return bars("bbbb") == "5" && bars("aaaa") == "0" }, 40*time.Second, 200*time.Millisecond,
		"the new source's requests (bbbb…) are not drawn, or the old one's (aaaa…) stay")
}

// A view request left hanging (a laptop's sleep, a VPN change) is given up
// after 20 s and the page polls on; before, the loop waited on it for as
// long as the browser kept the connection, the status green.
func TestAHangingAnswerIsGivenUp(t *testing.T) {
	f := &fakeAPI{hangViewAt: 3}
	f.setRequests("aaaa", 1)
	openPage(t, f, "#range=300")
	views := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.views }
	require.Eventually(t, func() bool { return views() >= 3 }, 30*time.Second, 100*time.Millisecond, "the page polls")
	assert.Eventually(t, func() bool { return views() >= 4 }, 40*time.Second, 200*time.Millisecond,
		"no view request after the one left hanging")
}

// barCounter returns how many request bars on b's page have a trace id
// starting with prefix, as a string (an error's text when the page cannot
// say).
func barCounter(b *viewcheck.Browser) func(prefix string) string {
	return func(prefix string) string {
		raw, err := b.Eval(fmt.Sprintf(`String(document.querySelectorAll('.request-bar[data-trace-id^="%s"]').length)`, prefix))
		if err != nil {
			return err.Error()
		}
		return strings.Trim(string(raw), `"`)
	}
}
