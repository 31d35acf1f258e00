#!/usr/bin/env bash
# Overload and memory, end to end through the built collector (make build):
# the quickstart's configuration (examples/quickstart/config.yaml:
# memory_limiter limit_mib 512, spike 128; the gpuviz processor; the
# simulated receiver where there are no GPUs) offered vLLM llm_request spans
# at a fixed rate by cmd/gpuviz-stress (pre-encoded OTLP/gRPC, bounded in
# flight, no retry: a refusal is counted, the point being that the client
# is told). Per run:
#
#   RSS      VmRSS of /proc/PID/status every 100 ms (its peak), and VmHWM at
#            the end
#   sender   spans offered, accepted, refused by gRPC code, unsent (due
#            while every request in flight was out: the collector answered
#            too slowly)
#   telemetry the collector's own counters (service::telemetry::metrics):
#            otelcol_receiver_accepted_spans / refused_spans (the OTLP
#            receiver), otelcol_exporter_sent_spans (the debug exporter),
#            otelcol_processor_gpuviz_phase_spans_added (the phase child
#            spans the processor adds, counted apart), _spans_refused (its
#            next consumer refused), _spans_unenriched by reason
#   lost     accepted - (exported - phase spans) once the collector has
#            drained (its held spans out): must be 0
#
# Variants, alternating A B A B per rate:
#   A  the quickstart without the gpuviz processor in the traces pipeline
#      (memory_limiter, batch)
#   B  the quickstart as it is
#
# The ports the quickstart binds are moved by an overlay config (the
# second --config), so a collector already on 4317 does not clash:
# OVERLOAD_PORT_BASE (24317) + 0..8.
#
# Environment (defaults): RATES ("20000 40000"), PAIRS (2), SECONDS (60; or
# MEASURE_SECONDS), DRAIN (90, seconds to wait for the held spans to leave),
# BATCH (100 spans per request), IN_FLIGHT (32), BIN
# (_build/otelcol-gpuviz), CONFIG (examples/quickstart/config.yaml),
# VARIANTS ("A B"), GOMEMLIMIT (400MiB, as `make run` sets it; empty: unset),
# PROFILE (unset; 1: a heap profile from the pprof extension when the
# sending ends, kept with KEEP=1). Extra arguments go to every collector
# run, e.g. --set=processors::gpuviz::max_pending_spans=100000.
#
#   make build && scripts/measure-overload.sh
#   PAIRS=1 SECONDS=10 RATES=20000 scripts/measure-overload.sh   # a smoke run
set -euo pipefail
run_s=$(printenv SECONDS || true)
run_s=${MEASURE_SECONDS:-${run_s:-60}}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
extra=("$@")

rates=${RATES:-20000 40000}
pairs=${PAIRS:-2}
drain=${DRAIN:-90}
batch=${BATCH:-100}
in_flight=${IN_FLIGHT:-32}
variants=${VARIANTS:-A B}
GOMEMLIMIT=${GOMEMLIMIT-400MiB}
if [ -n "$GOMEMLIMIT" ]; then export GOMEMLIMIT; else unset GOMEMLIMIT; fi
bin=${BIN:-_build/otelcol-gpuviz}
config=${CONFIG:-examples/quickstart/config.yaml}
base=${OVERLOAD_PORT_BASE:-24317}
otlp_port=$base telemetry_port=$((base + 1)) pprof_port=$((base + 2))

die() {
  echo "measure-overload: FAILED: $*" >&2
  if [ -n "${clog:-}" ] && [ -s "$clog" ]; then
    echo "--- collector log (last 30 lines): $clog" >&2
    tail -n 30 "$clog" >&2
  fi
  exit 1
}
for n in "$run_s" "$pairs" "$drain" "$batch" "$in_flight"; do
  [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "SECONDS, PAIRS, DRAIN, BATCH and IN_FLIGHT must be positive integers"
done
for r in $rates; do
  [[ $r =~ ^[0-9]+$ ]] && ((r > 0)) || die "RATES: $r is not a positive integer"
done
[ -x "$bin" ] || die "$bin not built (make build), or set BIN"
command -v jq > /dev/null || die "jq is needed to read the sender's summary"

work=$(mktemp -d "${TMPDIR:-/tmp}/measure-overload.XXXXXX")
cpid="" spid="" rpid="" hpid=""
cleanup() {
  for p in "$spid" "$rpid" "$hpid" "$cpid"; do [ -n "$p" ] && { stop "$p" 20 || true; }; done
  if [ -n "${KEEP:-}" ]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The overlay: the quickstart's ports moved, and the collector's own
# metrics on a known port. Lists replace, so A's traces processors are
# given whole.
cat > "$work/ports.yaml" <<YAML
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:$otlp_port}
      http: {endpoint: 127.0.0.1:$((base + 3))}
exporters:
  prometheus: {endpoint: 127.0.0.1:$((base + 4))}
extensions:
  health_check: {endpoint: 127.0.0.1:$((base + 5))}
  pprof: {endpoint: 127.0.0.1:$pprof_port}
  zpages: {endpoint: 127.0.0.1:$((base + 6))}
  gpuviz_view: {endpoint: 127.0.0.1:$((base + 7))}
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: $telemetry_port}
YAML
cat > "$work/baseline.yaml" <<YAML
service:
  pipelines:
    traces:
      processors: [memory_limiter, batch]
YAML

echo "# scripts/measure-overload.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "command: RATES=\"$rates\" PAIRS=$pairs SECONDS=$run_s BATCH=$batch IN_FLIGHT=$in_flight VARIANTS=\"$variants\" GOMEMLIMIT=${GOMEMLIMIT:-} CONFIG=$config scripts/measure-overload.sh${*:+ $*}"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- "$config" processor 2>/dev/null || echo ' (config or processor dirty)');" \
  "$("$bin" --version 2>/dev/null | head -1) built $(date -u -r "$bin" +%Y-%m-%dT%H:%M:%SZ);" \
  "$(nproc) CPUs: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
grep -E '^\s+(limit_mib|spike_limit_mib|check_interval|max_pending_spans):' "$config" | sed 's/^ */  config: /'

go build -o "$work/gpuviz-stress" ./cmd/gpuviz-stress || die "go build ./cmd/gpuviz-stress"

alive() { kill -0 "$1" 2>/dev/null; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
scrape() { curl -sf --max-time 5 "http://127.0.0.1:$telemetry_port/metrics" > "$work/metrics"; }
metric() { metric_sum "$@" < "$work/metrics"; } # name [label filter]
reasons() { unenriched_reasons < "$work/metrics"; } # from the last scrape

results=$work/results.tsv
: > "$results"

run_one() {
  local variant=$1 rate=$2 round=$3 cfgs=(--config "$config" --config "$work/ports.yaml")
  [ "$variant" = A ] && cfgs+=(--config "$work/baseline.yaml")
  clog=$work/collector-$rate-$variant-$round.log
  local sjson=$work/stress-$rate-$variant-$round.json rss=$work/rss-$rate-$variant-$round held=$work/held-$rate-$variant-$round
  for p in $(seq "$base" $((base + 7))); do
    port_busy "$p" && die "port $p is in use: set OVERLOAD_PORT_BASE"
  done
  "$bin" "${cfgs[@]}" "${extra[@]}" > "$clog" 2>&1 &
  cpid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    alive "$cpid" || die "$variant at $rate/s: the collector exited while starting"
    scrape && break
    sleep 0.1
  done
  scrape || die "$variant at $rate/s: no telemetry on :$telemetry_port after 30 s"
  # The processor enriches only once GPU data has come (else: no_gpu): wait
  # for the receiver's first scrape.
  for ((i = 0; i < 300; i++)); do
    scrape && (($(metric otelcol_receiver_accepted_metric_points) > 0)) && break
    sleep 0.1
  done

  (while kill -0 "$cpid" 2>/dev/null; do awk '/^VmRSS/{print $2}' "/proc/$cpid/status" 2>/dev/null; sleep 0.1; done) > "$rss" &
  rpid=$!
  # The spans the processor holds, once a second (its pending_spans gauge).
  # A scrape that fails (a slow answer under overload) is skipped: the
  # subshell inherits errexit and pipefail, and would stop sampling.
  (while kill -0 "$cpid" 2>/dev/null; do
    if m=$(curl -sf --max-time 2 "http://127.0.0.1:$telemetry_port/metrics"); then
      awk '$1 ~ /^otelcol_processor_gpuviz_pending_spans/ { s += $NF } END { print s + 0 }' <<<"$m"
    fi
    sleep 1
  done) > "$held" &
  hpid=$!
  "$work/gpuviz-stress" --endpoint "127.0.0.1:$otlp_port" --rate "$rate" --duration "${run_s}s" --batch "$batch" \
    --max-in-flight "$in_flight" --json > "$sjson" 2> "$work/stress-$rate-$variant-$round.log" &
  spid=$!
  local rc=0
  wait "$spid" || rc=$?
  spid=""
  ((rc == 0)) || die "$variant at $rate/s: gpuviz-stress exited with status $rc: $(tail -3 "$work/stress-$rate-$variant-$round.log")"
  alive "$cpid" || die "$variant at $rate/s: the collector exited during the run"
  if [ -n "${PROFILE:-}" ]; then
    curl -sf --max-time 30 "http://127.0.0.1:$pprof_port/debug/pprof/heap" > "$work/heap-$rate-$variant-$round.pb.gz" || true
  fi

  # Drain: the held spans leave within max_wait (and the quickstart's
  # 10 s scrapes); wait until every accepted span is out.
  local acc sent phase pending
  for ((i = 0; i < drain * 2; i++)); do
    scrape || die "$variant at $rate/s: telemetry scrape failed"
    acc=$(metric otelcol_receiver_accepted_spans) sent=$(metric otelcol_exporter_sent_spans)
    phase=$(metric otelcol_processor_gpuviz_phase_spans_added) pending=$(metric otelcol_processor_gpuviz_pending_spans)
    ((sent - phase >= acc && pending == 0)) && break
    sleep 0.5
  done
  local refused failed prefused hwm peak heldpeak why
  refused=$(metric otelcol_receiver_refused_spans) failed=$(metric otelcol_exporter_send_failed_spans)
  prefused=$(metric otelcol_processor_gpuviz_spans_refused) why=$(reasons)
  hwm=$(awk '/^VmHWM/{print $2}' "/proc/$cpid/status")
  rc=0
  stop "$cpid" 20 || rc=$?
  cpid=""
  stop "$rpid" 20 || true
  stop "$hpid" 20 || true
  rpid="" hpid=""
  ((rc == 0)) || die "$variant at $rate/s: the collector exited with status $rc on SIGTERM"
  peak=$(sort -n "$rss" | tail -1) heldpeak=$(sort -n "$held" | tail -1)

  local offered unsent saccepted srefused sre sun
  offered=$(jq .offered_spans "$sjson") unsent=$(jq .unsent_spans "$sjson") saccepted=$(jq .accepted_spans "$sjson")
  srefused=$(jq '[.refused_spans[]] | add // 0' "$sjson")
  sre=$(jq '.refused_spans.ResourceExhausted // 0' "$sjson") sun=$(jq '.refused_spans.Unavailable // 0' "$sjson")
  # variant rate round offered sent accepted(sender) refused(sender) RE UN accepted(receiver) refused(receiver) exported phase lost peak_kib hwm_kib
  printf '%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n' "$variant" "$rate" "$round" \
    "$offered" $((offered - unsent)) "$saccepted" "$srefused" "$sre" "$sun" "$acc" "$refused" $((sent - phase)) "$phase" \
    $((acc - (sent - phase))) "$peak" "$hwm" "${why:-none}" "$failed" "$prefused" "${heldpeak:-0}" >> "$results"
  tail -n 1 "$results" | awk -F'\t' '{
    printf "  %s round %s: offered %d, sent %d, accepted %d (receiver %d), refused %d (ResourceExhausted %d, Unavailable %d; receiver %d), exported %d + %d phase spans, lost %d, RSS peak %.1f MiB (VmHWM %.1f), held spans peak %d, unenriched %s\n",
      $1, $3, $4, $5, $6, $10, $7, $8, $9, $11, $12, $13, $14, $15 / 1024, $16 / 1024, $20, $17 }'
  ((saccepted == acc)) || echo "  WARNING: the sender counted $saccepted accepted, the receiver $acc" >&2
  ((acc == sent - phase)) || echo "  LOST: $((acc - (sent - phase))) accepted spans did not leave within ${drain} s (exporter failed $failed, processor refused $prefused)" >&2
}

for rate in $rates; do
  echo
  echo "rate $rate spans/s: $pairs rounds of $variants; ${run_s} s each"
  for ((round = 1; round <= pairs; round++)); do
    for variant in $variants; do
      run_one "$variant" "$rate" "$round"
    done
  done
done

echo
echo "## Results (${run_s} s per run; sent: offered less what found ${in_flight} requests out; refused: what the client was told, by code;"
echo "## lost: accepted - (exported - phase spans) after draining; RSS: VmHWM, and the peak of VmRSS sampled every 100 ms)"
printf "| %6s | %-14s | %5s | %9s | %9s | %18s | %9s | %9s | %4s | %10s |\n" rate variant round sent accepted "refused (Unavail.)" exported "phase" lost "RSS MiB"
printf "|-------:|----------------|------:|----------:|----------:|-------------------:|----------:|----------:|-----:|-----------:|\n"
awk -F'\t' '{ printf "| %6d | %-14s | %5d | %9d | %9d | %9d (%6d) | %9d | %9d | %4d | %4.0f (%3.0f) |\n", $2, ($1 == "A" ? "A (no gpuviz)" : "B (quickstart)"), $3, $5, $10, $7, $9, $12, $13, $14, $16 / 1024, $15 / 1024 }' "$results"
