package view

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"testing/fstest"
	"time"
)

func FuzzViewQuery(f *testing.F) {
	f.Add("300", "600", "", "", int64(0))
	f.Add("60", "4000", "9223372036854775807", "18446744073709551615", int64(-1e9))
	f.Add("900", "10", "-5", "0", int64(61e9))
	now := t0.Add(10 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	h := r.Handler(fstest.MapFS{})
	f.Fuzz(func(t *testing.T, rng, cols, since, after string, off int64) {
		ts := now.UnixNano() + off
		g.Add(Power, ts, 1)
		g.Label(ts, 1e8, "idle")
		s.AddRequest(&Request{GPUs: []*GPU{g}, Start: ts, End: ts + 1e9})
		v := url.Values{"range": {rng}, "columns": {cols}, "since": {since}, "requests_after": {after}}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/view?"+v.Encode(), nil))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("%v: %d %s", v, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%v: invalid JSON %s", v, rec.Body)
		}
	})
}
