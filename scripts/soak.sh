#!/usr/bin/env bash
# A soak of the built collector (make build loadgen): SOAK_MINUTES (12) of
# vLLM spans at SOAK_RATE (5,000/s; examples/loadgen --mode flood --match
# host) through the quickstart's pipelines (memory_limiter 512/128 MiB, the
# gpuviz processor in both, batch), on 8 simulated H200s whose faults cycle
# the whole time, every minute: a GPU reset, 20 s of a 30% error rate, a
# hung scrape call, a hung GPM call, 15 s of a lost GPU, an Xid storm
# (docs/reliability.md). One cycle a minute makes the minutes alike, so
# that a trend across them is memory kept, not the faults' phase.
#
# The processor's GPU history is sized down (retention 2m, 512 points per
# signal, books 2m) so that it is full after about 2 minutes: at the
# defaults (10m, 2048 points, 5m) it fills for about 9 minutes and a soak
# would need 25 to say anything about the steady state.
#
# Every 2 s it samples the collector's RSS (/proc/PID/status), goroutines
# (pprof), and its own telemetry: held spans, GPUs in the timeline, spans
# accepted and refused. RSS is a sawtooth (the Go runtime collects garbage
# when the heap doubles, and returns pages late; held spans rise and fall
# with the faults), so the slope is fitted to its envelope: each minute's
# highest RSS after SOAK_WARMUP (180 s), by least squares. The live heap (pprof, after a forced GC) is read at the
# end of the warm-up and at the end. It checks: envelope slope <= 1 MiB/min,
# goroutines within +-5 of their median, held spans within
# max_pending_spans, the collector alive and never panicked, and every span
# accepted came out (after a drain). The collector runs with the
# quickstart's sizing (max_pending_spans 60,000, GOMEMLIMIT 400MiB as
# `make run` sets it).
#
#   make build loadgen && scripts/soak.sh
#   SOAK_MINUTES=3 SOAK_WARMUP=60 scripts/soak.sh    # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
minutes=${SOAK_MINUTES:-12}
rate=${SOAK_RATE:-5000}
warmup=${SOAK_WARMUP:-180}
bin=${BIN:-_build/otelcol-gpuviz}
loadgen=${LOADGEN:-_build/loadgen}
[ -x "$bin" ] && [ -x "$loadgen" ] || { echo "soak: build first: make build loadgen" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")
read -r otlp telemetry pprof < <(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
max_pending=60000
cat >"$work/collector.yaml" <<EOF
receivers:
  gpuviz:
    collection_interval: 10s
    backend: simulated
    simulated:
      model: h200
      gpus: 8
      seed: 1
      scenario: steady
      faults:
        - {kind: reset, gpu: 1, after: 55s, duration: 5s, every: 60s}
        - {kind: error, gpu: 2, error: unknown, rate: 0.3, after: 30s, duration: 20s, every: 60s}
        - {kind: hang, gpu: 3, calls: [nvmlDeviceGetTemperature], sleep: 6s, after: 40s, duration: 6s, every: 60s}
        - {kind: hang, gpu: 4, calls: [nvmlGpmSampleGet], sleep: 3s, after: 50s, duration: 3s, every: 60s}
        - {kind: error, gpu: 5, error: gpu_is_lost, after: 45s, duration: 15s, every: 60s}
        - {kind: xid_storm, gpu: 6, xid: 13, rate: 200, after: 30s, duration: 10s, every: 60s}
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$otlp
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 512
    spike_limit_mib: 128
  gpuviz:
    max_pending_spans: $max_pending
    history:
      retention: 2m
      max_points_per_signal: 512
    attribution:
      horizon: 2m
  batch:
exporters:
  debug:
    verbosity: basic
    sampling_initial: 1
    sampling_thereafter: 1000
extensions:
  pprof:
    endpoint: 127.0.0.1:$pprof
service:
  extensions: [pprof]
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: $telemetry
  pipelines:
    metrics:
      receivers: [gpuviz]
      processors: [memory_limiter, gpuviz, batch]
      exporters: [debug]
    traces:
      receivers: [otlp]
      processors: [memory_limiter, gpuviz, batch]
      exporters: [debug]
EOF

cpid="" lpid=""
cleanup() {
  [ -n "$lpid" ] && kill "$lpid" 2>/dev/null || true
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
GOMEMLIMIT=${GOMEMLIMIT:-400MiB} "$bin" --config "$work/collector.yaml" >"$work/collector.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$telemetry/metrics" >/dev/null && break
  sleep 0.2
done
"$loadgen" --mode flood --match host --rate "$rate" --endpoint "127.0.0.1:$otlp" --duration "${minutes}m" >"$work/loadgen.log" 2>&1 &
lpid=$!
start=$(date +%s)

# metric NAME: the sum over one of the collector's own metrics.
metric() { curl -sf "http://127.0.0.1:$telemetry/metrics" | metric_sum "$1"; }
goroutines() {
  curl -sf "http://127.0.0.1:$pprof/debug/pprof/goroutine?debug=1" | awk 'NR==1 { print $4 }'
}
live_heap() { # bytes, after a forced GC
  curl -sf "http://127.0.0.1:$pprof/debug/pprof/heap?gc=1&debug=1" | awk '/^# HeapAlloc = / { print $4 }'
}
samples="$work/samples.tsv"
echo -e "t_s\trss_kib\tgoroutines\tpending_spans\tgpus\taccepted\trefused" >"$samples"
end=$((start + minutes * 60))
heap0=""
while [ "$(date +%s)" -lt "$end" ]; do
  sleep 2
  if [ -z "$heap0" ] && [ $(($(date +%s) - start)) -ge "$warmup" ]; then heap0=$(live_heap); fi
  kill -0 "$cpid" 2>/dev/null || { echo "soak: FAILED: the collector exited" >&2; tail -30 "$work/collector.log" >&2; exit 1; }
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$cpid/status")
  echo -e "$(($(date +%s) - start))\t$rss\t$(goroutines)\t$(metric otelcol_processor_gpuviz_pending_spans)\t$(metric otelcol_processor_gpuviz_gpus)\t$(metric otelcol_receiver_accepted_spans)\t$(metric otelcol_receiver_refused_spans)" >>"$samples"
done
heap1=$(live_heap)
wait "$lpid" || true
lpid=""
sleep 15 # drain: the longest hold, and the batch
accepted=$(metric otelcol_receiver_accepted_spans)
refused=$(metric otelcol_receiver_refused_spans)
sent=$(metric otelcol_exporter_sent_spans)
phases=$(metric otelcol_processor_gpuviz_phase_spans_added)
hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$cpid/status")
panics=$(grep -c panic "$work/collector.log" || true)

read -r gmin gmed gmax < <(awk -F'\t' -v w="$warmup" 'NR > 1 && $1 >= w { print $3 }' "$samples" | sort -n |
  awk '{ g[NR] = $1 } END { print g[1], g[int((NR + 1) / 2)], g[NR] }')
awk -F'\t' -v w="$warmup" -v gmin="$gmin" -v gmed="$gmed" -v gmax="$gmax" -v maxp="$max_pending" -v acc="$accepted" \
  -v ref="$refused" -v sent="$sent" -v ph="$phases" -v hwm="$hwm" -v panics="$panics" -v minutes="$minutes" -v rate="$rate" \
  -v heap0="$heap0" -v heap1="$heap1" '
  NR > 1 && $1 >= w {
    m = int(($1 - w) / 60); y = $2 / 1024
    if (!(m in top) || y > top[m]) top[m] = y
    if (m > last) last = m
    if ($4 > pmax) pmax = $4
  }
  END {
    for (m = 0; m < last; m++) { # whole minutes only
      n++; sx += m; sy += top[m]; sxx += m * m; sxy += m * top[m]; if (top[m] > rmax) rmax = top[m]
    }
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    lost = acc - (sent - ph)
    printf "| %d min | %d spans/s | %d | %d | %d | %d | %.2f MiB/min (%d minutes) | %.0f MiB | %.0f → %.0f MiB | %d-%d (median %d) | %d (of %d) |\n",
      minutes, rate, acc, ref, lost, panics, slope, n, hwm / 1024, heap0 / 1048576, heap1 / 1048576, gmin, gmax, gmed, pmax, maxp
    ok = n >= 3 && slope <= 1 && gmax - gmed <= 5 && gmed - gmin <= 5 && pmax <= maxp && lost == 0 && panics == 0
    if (!ok) { print "soak: FAILED: a bound did not hold (3+ minutes measured, slope <= 1 MiB/min, goroutines +-5, pending <= max, lost 0, panics 0)" > "/dev/stderr"; exit 1 }
  }' "$samples"
echo "soak: held; samples in $samples, logs in $work"
