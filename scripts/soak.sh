#!/usr/bin/env bash
# A soak of the built collector (make build loadgen): SOAK_MINUTES (12) of
# vLLM spans at SOAK_RATE (5,000/s; examples/loadgen --mode flood --match
# host) through the quickstart's pipelines (memory_limiter 512/128 MiB, the
# gpuviz processor in both, batch), on 8 simulated H200s whose faults cycle
# the whole time: a GPU reset every 90 s, a 30% error rate, a hung scrape
# call and a hung GPM call every minute, a lost GPU every 2 minutes, an Xid
# storm every minute (docs/reliability.md).
#
# The processor's GPU history is sized down (retention 2m, 512 points per
# signal, books 2m) so that it is full after about 2 minutes: at the
# defaults (10m, 2048 points, 5m) it fills for about 9 minutes and a soak
# would need 25 to say anything about the steady state.
#
# Every 10 s it samples the collector's RSS (/proc/PID/status), goroutines
# (pprof), and its own telemetry: held spans, GPUs in the timeline, spans
# accepted, refused and sent. After SOAK_WARMUP (180 s) it fits RSS against
# time (least squares) and checks: slope <= 1 MiB/min, goroutines within
# +-5 of their median, held spans within max_pending_spans, the collector
# alive and never panicked, and every span accepted came out (after a drain).
#
#   make build loadgen && scripts/soak.sh
#   SOAK_MINUTES=3 SOAK_WARMUP=60 scripts/soak.sh    # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
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
max_pending=50000
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
        - {kind: reset, gpu: 1, after: 60s, duration: 5s, every: 90s}
        - {kind: error, gpu: 2, error: unknown, rate: 0.3, after: 30s, duration: 20s, every: 60s}
        - {kind: hang, gpu: 3, calls: [nvmlDeviceGetTemperature], sleep: 6s, after: 40s, duration: 6s, every: 60s}
        - {kind: hang, gpu: 4, calls: [nvmlGpmSampleGet], sleep: 3s, after: 50s, duration: 3s, every: 60s}
        - {kind: error, gpu: 5, error: gpu_is_lost, after: 45s, duration: 15s, every: 120s}
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
"$bin" --config "$work/collector.yaml" >"$work/collector.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$telemetry/metrics" >/dev/null && break
  sleep 0.2
done
"$loadgen" --mode flood --match host --rate "$rate" --endpoint "127.0.0.1:$otlp" --duration "${minutes}m" >"$work/loadgen.log" 2>&1 &
lpid=$!
start=$(date +%s)

# metric NAME: the sum over a telemetry metric's series (counters may carry _total).
metric() {
  curl -sf "http://127.0.0.1:$telemetry/metrics" | awk -v n="$1" '
    $1 !~ /^#/ { m = $1; sub(/\{.*/, "", m); if (m == n || m == n "_total") s += $NF } END { printf "%.0f\n", s }'
}
goroutines() {
  curl -sf "http://127.0.0.1:$pprof/debug/pprof/goroutine?debug=1" | awk 'NR==1 { print $4 }'
}
samples="$work/samples.tsv"
echo -e "t_s\trss_kib\tgoroutines\tpending_spans\tgpus\taccepted\trefused" >"$samples"
end=$((start + minutes * 60))
while [ "$(date +%s)" -lt "$end" ]; do
  sleep 10
  kill -0 "$cpid" 2>/dev/null || { echo "soak: FAILED: the collector exited" >&2; tail -30 "$work/collector.log" >&2; exit 1; }
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$cpid/status")
  echo -e "$(($(date +%s) - start))\t$rss\t$(goroutines)\t$(metric otelcol_processor_gpuviz_pending_spans)\t$(metric otelcol_processor_gpuviz_gpus)\t$(metric otelcol_receiver_accepted_spans)\t$(metric otelcol_receiver_refused_spans)" >>"$samples"
done
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
awk -F'\t' -v w="$warmup" -v gmin="$gmin" -v gmed="$gmed" -v gmax="$gmax" -v maxp="$max_pending" -v acc="$accepted" -v ref="$refused" -v sent="$sent" -v ph="$phases" \
  -v hwm="$hwm" -v panics="$panics" -v minutes="$minutes" -v rate="$rate" '
  NR > 1 && $1 >= w {
    n++; x = $1 / 60; y = $2 / 1024; sx += x; sy += y; sxx += x * x; sxy += x * y
    if ($4 > pmax) pmax = $4; if (y > rmax) rmax = y
  }
  END {
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    lost = acc - (sent - ph)
    printf "| %d min | %d spans/s | %d | %d | %d | %d | %.2f MiB/min | %.0f MiB | %.0f MiB | %d-%d (median %d) | %d (of %d) | %d |\n",
      minutes, rate, acc, ref, lost, panics, slope, rmax, hwm / 1024, gmin, gmax, gmed, pmax, maxp, n
    ok = slope <= 1 && gmax - gmed <= 5 && gmed - gmin <= 5 && pmax <= maxp && lost == 0 && panics == 0
    if (!ok) { print "soak: FAILED: a bound did not hold (slope <= 1 MiB/min, goroutines +-5, pending <= max, lost 0, panics 0)" > "/dev/stderr"; exit 1 }
  }' "$samples"
echo "soak: held; samples in $samples, logs in $work"
