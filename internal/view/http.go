package view // import "github.com/gpuviz/gpuviz/internal/view"

import (
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Handler serves the page (assets: index.html at its root, the rest under
// assets/) and the JSON API. GET and HEAD only (RFC 9110 §9.1: a server
// that has GET has HEAD; net/http sends HEAD the headers of the GET without
// its body): anything else is 405; unknown paths 404; bad parameters 400
// with {"error": "..."} naming the parameter.
func (r *Registry) Handler(assets fs.FS) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/sources", r.serveSources)
	mux.HandleFunc("/api/v1/view", r.serveView)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, req *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %q: /api/v1/sources and /api/v1/view are", req.URL.Path))
	})
	files := http.FileServerFS(assets)
	mux.HandleFunc("/assets/", func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/") { // a folder: no listing
			http.NotFound(w, req)
			return
		}
		files.ServeHTTP(w, req)
	})
	mux.HandleFunc("/{$}", files.ServeHTTP)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, req.Method+" is not allowed: the view is read-only (GET, HEAD)")
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, req)
	})
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	b := append([]byte(`{"error":`), strconv.Quote(msg)...)
	_, _ = w.Write(append(b, "}\n"...))
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func (r *Registry) serveSources(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, r.AppendSources(nil))
}

// AppendSources appends the /api/v1/sources answer to b.
func (r *Registry) AppendSources(b []byte) []byte {
	b = append(b, `{"sources":[`...)
	for i, s := range r.Sources() {
		if i > 0 {
			b = append(b, ',')
		}
		gpus := s.snapshot()
		sim := false
		for _, g := range gpus {
			sim = sim || g.info().simulated
		}
		b = append(b, `{"id":`...)
		b = appendString(b, s.id)
		b = append(b, `,"simulated":`...)
		b = strconv.AppendBool(b, sim)
		b = append(b, `,"gpus":`...)
		b = strconv.AppendInt(b, int64(len(gpus)), 10)
		b = append(b, `,"refused":{"gpus":`...)
		b = strconv.AppendInt(b, s.refusedGPUs.Load(), 10)
		b = append(b, `,"samples_too_old":`...)
		b = strconv.AppendInt(b, s.tooOld.Load(), 10)
		b = append(b, `,"requests_overwritten":`...)
		b = strconv.AppendInt(b, s.droppedRequests.Load(), 10)
		b = append(b, "}}"...)
	}
	b = append(b, `],"trace_url_template":`...)
	b = appendString(b, r.traceURL)
	b = append(b, `,"retention_s":`...)
	b = strconv.AppendInt(b, int64(r.limits.Retention/time.Second), 10)
	return append(b, "}\n"...)
}

// bufPool keeps answer buffers between requests.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

func (r *Registry) serveView(w http.ResponseWriter, req *http.Request) {
	// url.URL.Query drops the pairs it cannot parse (a bad escape, a ';'),
	// which would answer as if they were absent: refuse them instead.
	v, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "query: "+err.Error())
		return
	}
	q, src, err := r.ParseQuery(v)
	if err != nil {
		code := http.StatusBadRequest
		if src == nil && err == errNoSource {
			code = http.StatusNotFound
		}
		writeError(w, code, err.Error())
		return
	}
	select {
	case r.answering <- struct{}{}:
		defer func() { <-r.answering }()
	case <-req.Context().Done():
		writeError(w, http.StatusServiceUnavailable, "the request ended while other view answers were being built")
		return
	}
	bp := bufPool.Get().(*[]byte)
	b := src.AppendView((*bp)[:0], q, r.now(), r.traceURL)
	b = append(b, '\n')
	writeJSON(w, b)
	if cap(b) <= 64<<20 {
		*bp = b
		bufPool.Put(bp)
	}
}

// queryParams are the parameters of /api/v1/view.
var queryParams = []string{"source", "range", "columns", "since", "requests_after"}

var errNoSource = fmt.Errorf("no source: no gpuviz processor has registered with this view (is one in a pipeline?)")

// ParseQuery validates the parameters of /api/v1/view and finds the
// source; an error names the parameter.
func (r *Registry) ParseQuery(v url.Values) (Query, *Source, error) {
	q := Query{Range: DefaultRange, Columns: DefaultColumns}
	// A misspelt parameter would otherwise be answered with the default of
	// the one meant, and a repeated one with its first value.
	names := make([]string, 0, len(v))
	for name := range v {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case !slices.Contains(queryParams, name):
			return q, nil, fmt.Errorf("%s: no such parameter (there are: %s)", strconv.Quote(name), strings.Join(queryParams, ", "))
		case len(v[name]) > 1:
			return q, nil, fmt.Errorf("%s: given %d times", name, len(v[name]))
		}
	}
	sources := r.Sources()
	var src *Source
	if id := v.Get("source"); id != "" {
		var ids []string
		for _, s := range sources {
			if s.id == id {
				src = s
			}
			ids = append(ids, strconv.Quote(s.id))
		}
		if src == nil {
			return q, nil, fmt.Errorf("source: no source %q (there are: %s)", id, strings.Join(ids, ", "))
		}
	} else if len(sources) > 0 {
		src = sources[0]
	}
	if s := v.Get("range"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		maxRange := int64(r.limits.Retention / time.Second)
		if err != nil || n < int64(MinRange/time.Second) || n > maxRange {
			return q, src, fmt.Errorf("range: %q is not a whole number of seconds from %d to %d (the retention)", s, int64(MinRange/time.Second), maxRange)
		}
		q.Range = time.Duration(n) * time.Second
	}
	if s := v.Get("columns"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < MinColumns || n > MaxColumns {
			return q, src, fmt.Errorf("columns: %q is not a whole number from %d to %d", s, MinColumns, MaxColumns)
		}
		q.Columns = n
	}
	if s := v.Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return q, src, fmt.Errorf("since: %q is not a time in Unix milliseconds", s)
		}
		q.Since, q.HasSince = n, true
	}
	if s := v.Get("requests_after"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, src, fmt.Errorf("requests_after: %q is not a request sequence number", s)
		}
		q.RequestsAfter, q.HasAfter = n, true
	}
	if src == nil {
		return q, nil, errNoSource
	}
	return q, src, nil
}
