package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain runs the viewer itself, with the arguments VIEWLOAD_ARGS holds,
// where a test starts this binary so.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("VIEWLOAD_ARGS"); ok {
		os.Args = append([]string{"viewload"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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

// The viewer's -timeout bounds every fetch, in either mode: against a view
// that never answers it exits 1 once the timeout passes. A -timeout that
// is not positive (no bound at all) is refused.
func TestTheViewerExitsOneWhenAFetchTimesOut(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	for _, tt := range []struct{ args, says string }{
		{"-mode latency -n 1 -timeout 50ms", "Timeout"},
		{"-mode poll -timeout 50ms", "Timeout"},
		{"-mode latency -n 1 -timeout 0s", "not positive"},
	} {
		t.Run(tt.args, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "VIEWLOAD_ARGS=-url "+srv.URL+" "+tt.args)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("viewer exited %v, want status 1; it said %s", err, out.String())
				}
				if !strings.Contains(out.String(), tt.says) {
					t.Fatalf("viewer said %q, want %q in it", out.String(), tt.says)
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatal("viewer still waiting 10 s on, past its 50 ms timeout")
			}
		})
	}
}
