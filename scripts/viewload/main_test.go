package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// A view that never answers, or stops in the middle of its answer, fails
// the fetch once the client's timeout passes, instead of holding it (and
// scripts/measure-view.sh) for ever.
func TestFetchOfAViewThatNeverAnswersFails(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request, hold <-chan struct{})
	}{
		{"no answer", func(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}},
		{"answer stops", func(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"time":[1,`))
			w.(http.Flusher).Flush()
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hold := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tt.handler(w, r, hold)
			}))
			defer srv.Close()
			defer close(hold)

			done := make(chan error, 1)
			go func() {
				_, _, _, err := fetch(&http.Client{Timeout: 50 * time.Millisecond}, srv.URL, url.Values{})
				done <- err
			}()
			select {
			case err := <-done:
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("fetch returned %v, want a timeout", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("fetch still waiting 10 s on, past its 50 ms timeout")
			}
		})
	}
}

func TestFetchReadsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/view" || r.URL.Query().Get("since") != "7" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(`{"time":[7,8],"requests_seq":3,"gpus":[{"id":"a"}]}`))
	}))
	defer srv.Close()
	a, size, _, err := fetch(&http.Client{Timeout: time.Minute}, srv.URL, url.Values{"since": {"7"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Time) != 2 || a.Time[1] != 8 || a.RequestsSeq != 3 || len(a.GPUs) != 1 || size == 0 {
		t.Fatalf("fetch read %+v (%d bytes)", a, size)
	}
	if _, _, _, err := fetch(&http.Client{Timeout: time.Minute}, srv.URL, url.Values{}); err == nil {
		t.Fatal("a 400 answer is not an error")
	}
}
