#!/usr/bin/env bash
# What the gpuviz processor costs, end to end through the built collector
# (make build): CPU per span and peak RSS with and without the processor in
# the traces pipeline, under a fixed span rate.
#
#   A      examples/bench/baseline.yaml: OTLP/gRPC -> debug for traces; the
#          simulated gpuviz receiver (8 x H200, 1 s) -> gpuviz -> debug for metrics
#   B_on   examples/bench/gpuviz.yaml: the same with the gpuviz processor in
#          the traces pipeline too (phase spans on, the default)
#   B_off  B with --set=processors::gpuviz::phase_spans=false
#
# Load: examples/loadgen --mode flood --match host: vLLM llm_request spans of
# 0.5-3.5 s, ending at a fixed rate, without a GPU hint (host.name is this
# host's, so they match all 8 GPUs), one export every 200 ms. The load
# generator is its own process and competes with the collector for CPUs; its
# CPU is reported too.
#
# Per run, after a warm-up: the collector's CPU seconds (utime+stime of
# /proc/PID/stat), the spans its OTLP receiver accepted (its own
# otelcol_receiver_accepted_spans, from the telemetry endpoint), CPU us per
# accepted span (the spans sent in; B_on's phase spans are not counted), and
# peak RSS (VmHWM, over the whole run). Each run's line also gives the spans
# the processor enriched and passed unenriched in the window (the reasons
# counted since the collector started: no_gpu during the first second, before
# any GPU data, is expected; overflow means max_pending_spans was reached) and, for B, how long
# its batches were held on average (otelcol_processor_gpuviz_hold_duration). Runs alternate A, B_on, B_off for
# PAIRS rounds per rate; the tables give medians and the ratios to A.
#
# The script stops, loudly, if the collector exits, its receiver refuses a
# span, or the load generator drops or has spans rejected. It flags (WARNING)
# a run whose accepted rate is off the asked one by over 5%, or whose load
# generator had to retry an export (the collector stalled); the summary
# names the flagged runs its medians include.
#
# Environment (defaults): RATES ("2000 20000"), VARIANTS ("A B_on B_off": which
# run each round, in that order; the ratios need A), PAIRS (3), SECONDS (60, per
# run; MEASURE_SECONDS also works), WARMUP (50: past the processor's
# warm-up hold, which at 2,000 spans/s holds the first 45 s), BIN (_build/otelcol-gpuviz),
# BENCH_OTLP_PORT (4317), BENCH_TELEMETRY_PORT (8888), LOADGEN (a built
# examples/loadgen, for a host without Go; built here if unset). Extra arguments go to
# every collector run, e.g. --set=processors::gpuviz::max_pending_spans=100000.
#
#   make build && scripts/measure-processor.sh
#   PAIRS=1 SECONDS=10 RATES=2000 scripts/measure-processor.sh   # a smoke run
#   PAIRS=1 SECONDS=600 RATES=2000 scripts/measure-processor.sh  # whole episodes
#
# The simulated GPUs repeat a 10-minute episode aligned on the clock (its
# schedule built at xx:x0:00, its GPUs waiting through the minute before);
# shorter windows catch those unevenly, which at 2,000 spans/s moves a run by
# 2-3 us a span. SECONDS=600 gives every variant exactly one of each.
set -euo pipefail
# SECONDS is bash's clock: it holds a value only if the caller exported one.
run_s=$(printenv SECONDS || true)
run_s=${MEASURE_SECONDS:-${run_s:-60}}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
extra=("$@")

rates=${RATES:-2000 20000}
variants=${VARIANTS:-A B_on B_off}
pairs=${PAIRS:-3}
warmup=${WARMUP:-50}
bin=${BIN:-_build/otelcol-gpuviz}
export BENCH_OTLP_PORT=${BENCH_OTLP_PORT:-4317}
export BENCH_TELEMETRY_PORT=${BENCH_TELEMETRY_PORT:-8888}
hz=$(getconf CLK_TCK)

die() {
  echo "measure-processor: FAILED: $*" >&2
  if [ -n "${clog:-}" ] && [ -s "$clog" ]; then
    echo "--- collector log (last 30 lines): $clog" >&2
    tail -n 30 "$clog" >&2
  fi
  if [ -n "${lerr:-}" ] && [ -s "$lerr" ]; then
    echo "--- loadgen log (last 10 lines): $lerr" >&2
    tail -n 10 "$lerr" >&2
  fi
  exit 1
}
for n in "$run_s" "$pairs" "$warmup"; do
  [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "SECONDS, PAIRS and WARMUP must be positive integers (got SECONDS=$run_s PAIRS=$pairs WARMUP=$warmup)"
done
for r in $rates; do
  [[ $r =~ ^[0-9]+$ ]] && ((r > 0)) || die "RATES: $r is not a positive integer"
done
for v in $variants; do
  [[ $v =~ ^(A|B_on|B_off)$ ]] || die "VARIANTS: $v is not one of A, B_on, B_off"
done
[ -x "$bin" ] || die "$bin not built (make build), or set BIN"

work=$(mktemp -d "${TMPDIR:-/tmp}/measure-processor.XXXXXX")
cpid="" lpid=""
cleanup() {
  [ -n "$lpid" ] && { stop "$lpid" || true; }
  [ -n "$cpid" ] && { stop "$cpid" || true; }
  if [ -n "${KEEP:-}" ]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# scripts/measure-processor.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "command: RATES=\"$rates\" VARIANTS=\"$variants\" PAIRS=$pairs SECONDS=$run_s WARMUP=$warmup scripts/measure-processor.sh${*:+ $*}"
# The binary carries no commit: it is named by its hash and build time, and
# the checkout's commit is only where the script ran.
echo "build $bin, sha256 $(sha256sum "$bin" | cut -c1-12), $("$bin" --version 2>/dev/null | head -1), built $(date -u -r "$bin" +%Y-%m-%dT%H:%M:%SZ);" \
  "checkout $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)');" \
  "$(nproc) CPUs: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"

if [ -n "${LOADGEN:-}" ]; then
  cp "$LOADGEN" "$work/loadgen" || die "LOADGEN=$LOADGEN: cannot copy it"
else
  go build -o "$work/loadgen" ./examples/loadgen || die "go build ./examples/loadgen"
fi

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
alive() { kill -0 "$1" 2>/dev/null; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
scrape() { curl -sf --max-time 5 "http://127.0.0.1:$BENCH_TELEMETRY_PORT/metrics" > "$work/metrics"; }
metric() { metric_sum "$@" < "$work/metrics"; } # name [label filter]
reasons() { unenriched_reasons < "$work/metrics"; } # from the last scrape

results=$work/results.tsv
: > "$results"

# run_one variant rate round: one collector, one load generator, one line.
run_one() {
  local variant=$1 rate=$2 round=$3 cfg args=()
  case $variant in
    A) cfg=examples/bench/baseline.yaml ;;
    B_on) cfg=examples/bench/gpuviz.yaml ;;
    B_off) cfg=examples/bench/gpuviz.yaml args=(--set=processors::gpuviz::phase_spans=false) ;;
  esac
  clog=$work/collector-$rate-$variant-$round.log
  lerr=$work/loadgen-$rate-$variant-$round.log
  for p in "$BENCH_OTLP_PORT" "$BENCH_TELEMETRY_PORT"; do
    port_busy "$p" && die "port $p is in use (another collector?): set BENCH_OTLP_PORT / BENCH_TELEMETRY_PORT"
  done
  "$bin" --config "$cfg" "${args[@]}" "${extra[@]}" > "$clog" 2>&1 &
  cpid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    alive "$cpid" || die "$variant at $rate/s: the collector exited while starting"
    scrape && port_busy "$BENCH_OTLP_PORT" && break
    sleep 0.1
  done
  scrape || die "$variant at $rate/s: no telemetry on :$BENCH_TELEMETRY_PORT after 30 s"
  port_busy "$BENCH_OTLP_PORT" || die "$variant at $rate/s: no OTLP receiver on :$BENCH_OTLP_PORT after 30 s"

  "$work/loadgen" --mode flood --rate "$rate" --match host --families vllm \
    --endpoint "127.0.0.1:$BENCH_OTLP_PORT" --duration "$((warmup + run_s + 60))s" > /dev/null 2> "$lerr" &
  lpid=$!
  sleep "$warmup"
  alive "$cpid" || die "$variant at $rate/s: the collector exited during the warm-up"
  alive "$lpid" || die "$variant at $rate/s: the load generator exited during the warm-up"
  scrape || die "$variant at $rate/s: telemetry scrape failed"
  local c0 l0 a0 e0 u0 t0
  c0=$(ticks "$cpid") l0=$(ticks "$lpid") t0=$(date +%s.%N)
  a0=$(metric otelcol_receiver_accepted_spans) e0=$(metric otelcol_processor_gpuviz_spans_enriched)
  u0=$(metric otelcol_processor_gpuviz_spans_unenriched)
  local hs0 hc0
  hs0=$(metric otelcol_processor_gpuviz_hold_duration_sum) hc0=$(metric otelcol_processor_gpuviz_hold_duration_count)
  sleep "$run_s"
  alive "$cpid" || die "$variant at $rate/s: the collector exited during the run"
  alive "$lpid" || die "$variant at $rate/s: the load generator exited during the run"
  local c1 l1 a1 e1 t1 hwm refused unenriched why
  c1=$(ticks "$cpid") l1=$(ticks "$lpid") t1=$(date +%s.%N)
  scrape || die "$variant at $rate/s: telemetry scrape failed"
  a1=$(metric otelcol_receiver_accepted_spans) e1=$(metric otelcol_processor_gpuviz_spans_enriched)
  refused=$(metric otelcol_receiver_refused_spans)
  unenriched=$(($(metric otelcol_processor_gpuviz_spans_unenriched) - u0)) why=$(reasons)
  local held=""
  if (($(metric otelcol_processor_gpuviz_hold_duration_count) > hc0)); then
    held=$(awk -v s="$(($(metric otelcol_processor_gpuviz_hold_duration_sum) - hs0))" \
      -v n="$(($(metric otelcol_processor_gpuviz_hold_duration_count) - hc0))" 'BEGIN { printf ", batches held %.1f s on average", s / n }')
  fi
  hwm=$(awk '/^VmHWM/{print $2}' "/proc/$cpid/status")

  local rc=0
  stop "$lpid" || rc=$?
  lpid=""
  ((rc == 0)) || die "$variant at $rate/s: the load generator exited with status $rc"
  local account retries
  account=$(grep -o '[0-9]* retries, [0-9]* spans dropped in [0-9]* failed batches, [0-9]* rejected' "$lerr" | tail -1)
  [ -n "$account" ] || die "$variant at $rate/s: no exporter account in the load generator's log"
  retries=${account%% *} account=${account#*retries, }
  [[ $account == "0 spans dropped in 0 failed batches, 0 rejected" ]] || die "$variant at $rate/s: the load generator lost spans: $account"
  ((refused == 0)) || die "$variant at $rate/s: the collector refused $refused spans"
  rc=0
  stop "$cpid" || rc=$?
  cpid=""
  ((rc == 0)) || die "$variant at $rate/s: the collector exited with status $rc on SIGTERM"

  local spans=$((a1 - a0))
  ((spans > 0)) || die "$variant at $rate/s: no spans accepted during the run"
  # variant rate round elapsed spans cpu_s us/span hwm_kib loadgen_cpu_s enriched
  awk -v v="$variant" -v r="$rate" -v k="$round" -v t0="$t0" -v t1="$t1" -v n="$spans" \
    -v c="$((c1 - c0))" -v l="$((l1 - l0))" -v hz="$hz" -v h="$hwm" -v e="$((e1 - e0))" 'BEGIN {
      el = t1 - t0
      printf "%s\t%s\t%s\t%.3f\t%d\t%.3f\t%.2f\t%d\t%.3f\t%d\n", v, r, k, el, n, c / hz, 1e6 * c / hz / n, h, l / hz, e }' >> "$results"
  tail -n 1 "$results" | awk -F'\t' -v target="$rate" -v u="$unenriched" -v why="$why" -v held="$held" -v retries="$retries" -v flagged="$work/flagged-$rate" '{
    printf "  %-5s round %s: %7.0f spans/s, collector %5.1f%% of a core, %6.2f us/span, peak RSS %6.1f MiB, loadgen %5.1f%%, enriched %d, unenriched %s (since the start: %s)%s\n",
      $1, $3, $5 / $4, 100 * $6 / $4, $7, $8 / 1024, 100 * $9 / $4, $10, u, (why != "" ? why : "none"), held
    w = ""
    if ($5 / $4 < 0.95 * target) w = w sprintf("  WARNING: %.0f spans/s is under 95%% of the %d asked for: the load generator did not keep up\n", $5 / $4, target)
    if ($5 / $4 > 1.05 * target) w = w sprintf("  WARNING: %.0f spans/s is over 105%% of the %d asked for: the load generator caught up after a stall\n", $5 / $4, target)
    if (retries > 0) w = w sprintf("  WARNING: the load generator retried %d exports (one waited 5 s, or the receiver was unavailable): the collector stalled, and a retried batch may be counted twice\n", retries)
    if ($1 != "A" && $10 < $5 / 2) w = w sprintf("  WARNING: the processor enriched %d of the %d spans in the window: it was still holding them (the warm-up hold, attribution.warmup_wait, 45 s by default, while under half of max_pending_spans); raise WARMUP past it\n", $10, $5)
    printf "%s", w
    if (w != "") print $1 " round " $3 >> flagged }'
}

for rate in $rates; do
  echo
  echo "rate $rate spans/s: $pairs rounds of ${variants// /, }; ${run_s} s each after ${warmup} s warm-up"
  for ((round = 1; round <= pairs; round++)); do
    for variant in $variants; do
      run_one "$variant" "$rate" "$round"
    done
  done
done

median() { # variant rate column: the median over the rounds
  awk -F'\t' -v v="$1" -v r="$2" -v c="$3" '$1 == v && $2 == r { print $c }' "$results" | sort -g |
    awk '{ a[NR] = $1 } END { if (!NR) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
echo
echo "## Results: medians of $pairs runs per cell, ${run_s} s each"
echo "(us/span: collector CPU over spans its receiver accepted; RSS: VmHWM; loadgen: its own CPU, % of a core)"
for rate in $rates; do
  echo
  echo "rate $rate spans/s"
  printf "| %-7s | %8s | %10s | %12s | %9s | %12s | %9s |\n" variant spans/s "us/span" "us/span - A" "peak MiB" "collector %" "loadgen %"
  printf "|---------|---------:|-----------:|-------------:|----------:|-------------:|----------:|\n"
  a_us=$(median A "$rate" 7) a_hwm=$(median A "$rate" 8)
  for variant in $variants; do
    awk -v v="$variant" -v el="$(median "$variant" "$rate" 4)" -v n="$(median "$variant" "$rate" 5)" \
      -v cpu="$(median "$variant" "$rate" 6)" -v us="$(median "$variant" "$rate" 7)" -v h="$(median "$variant" "$rate" 8)" \
      -v l="$(median "$variant" "$rate" 9)" -v aus="$a_us" 'BEGIN {
        d = (v == "A" || aus == "") ? "" : sprintf("%+.2f", us - aus)
        printf "| %-7s | %8.0f | %10.2f | %12s | %9.1f | %12.1f | %9.1f |\n", v, n / el, us, d, h / 1024, 100 * cpu / el, 100 * l / el }'
  done
  [ -n "$a_us" ] || continue
  for variant in ${variants//A/}; do
    awk -v v="$variant" -v us="$(median "$variant" "$rate" 7)" -v h="$(median "$variant" "$rate" 8)" -v aus="$a_us" -v ah="$a_hwm" \
      'BEGIN { printf "%s/A: CPU per span %.2fx, peak RSS %.2fx\n", v, us / aus, h / ah }'
  done
done
for rate in $rates; do
  [ -s "$work/flagged-$rate" ] || continue
  echo "WARNING: the medians at $rate spans/s include $(wc -l < "$work/flagged-$rate") flagged run(s) (see above): $(paste -sd, "$work/flagged-$rate" | sed 's/,/, /g')"
done
