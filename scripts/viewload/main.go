// Command viewload loads the gpuviz_view API as the page does, for
// scripts/measure-view.sh: poll, once a second, the increments since the
// last answer (columns since the newest column, requests after the newest
// sequence number), after one full fetch; or time a number of full fetches
// back to back and print their latency percentiles. A fetch that fails, or
// gets no whole answer within -timeout, ends it with exit status 1.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8787", "the view's address")
	rangeS := flag.Int("range", 300, "range, seconds")
	columns := flag.Int("columns", 600, "columns")
	mode := flag.String("mode", "poll", "poll: as the page does, every interval; latency: -n full fetches back to back")
	interval := flag.Duration("interval", time.Second, "poll interval")
	duration := flag.Duration("duration", time.Minute, "how long to poll")
	n := flag.Int("n", 200, "full fetches to time (latency mode)")
	timeout := flag.Duration("timeout", 10*time.Second, "the most one fetch may take, its whole answer read; a fetch past it fails the run")
	flag.Parse()
	if *timeout <= 0 {
		log.Fatalf("-timeout: %v is not positive", *timeout)
	}
	client := &http.Client{Timeout: *timeout}
	q := url.Values{"range": {fmt.Sprint(*rangeS)}, "columns": {fmt.Sprint(*columns)}}
	switch *mode {
	case "poll":
		poll(client, *base, q, *interval, *duration)
	case "latency":
		latency(client, *base, q, *n)
	default:
		log.Fatalf("-mode: %q is neither poll nor latency", *mode)
	}
}

type answer struct {
	Time        []int64 `json:"time"`
	RequestsSeq int64   `json:"requests_seq"`
	GPUs        []struct {
		ID string `json:"id"`
	} `json:"gpus"`
}

// fetch asks the view once; client's timeout bounds the whole exchange, the
// body's reading included.
func fetch(client *http.Client, base string, q url.Values) (answer, int, time.Duration, error) {
	start := time.Now()
	resp, err := client.Get(base + "/api/v1/view?" + q.Encode())
	if err != nil {
		return answer{}, 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	elapsed := time.Since(start)
	if err != nil {
		return answer{}, 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, 0, 0, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return answer{}, 0, 0, err
	}
	return a, len(body), elapsed, nil
}

func poll(client *http.Client, base string, q url.Values, interval, duration time.Duration) {
	a, size, _, err := fetch(client, base, q)
	if err != nil {
		log.Fatal(err)
	}
	total, polls := size, 1
	end := time.Now().Add(duration)
	t := time.NewTicker(interval)
	defer t.Stop()
	for time.Now().Before(end) {
		<-t.C
		inc := url.Values{"range": q["range"], "columns": q["columns"]}
		if len(a.Time) > 0 {
			inc.Set("since", fmt.Sprint(a.Time[len(a.Time)-1]))
		}
		inc.Set("requests_after", fmt.Sprint(a.RequestsSeq))
		next, size, _, err := fetch(client, base, inc)
		if err != nil {
			log.Fatal(err)
		}
		if len(next.Time) > 0 {
			a.Time = next.Time
		}
		a.RequestsSeq = max(a.RequestsSeq, next.RequestsSeq)
		total += size
		polls++
	}
	fmt.Printf("polls %d bytes %d gpus %d\n", polls, total, len(a.GPUs))
}

func latency(client *http.Client, base string, q url.Values, n int) {
	var ms []float64
	size, gpus, cols := 0, 0, 0
	for range n {
		a, s, d, err := fetch(client, base, q)
		if err != nil {
			log.Fatal(err)
		}
		ms = append(ms, float64(d.Microseconds())/1000)
		size, gpus, cols = s, len(a.GPUs), len(a.Time)
	}
	slices.Sort(ms)
	at := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	fmt.Fprintf(os.Stdout, "fetches %d gpus %d columns %d bytes %d p50_ms %.1f p99_ms %.1f max_ms %.1f\n",
		n, gpus, cols, size, at(0.5), at(0.99), ms[len(ms)-1])
}
