#!/usr/bin/env bash
# What the live view costs, end to end through the built collector (make
# build): the collector's CPU with the gpuviz_view extension and nobody
# looking (A), with one viewer polling the API as the page does (B: one full
# fetch, then every second the columns and requests since the last answer,
# range 5 min), and without the extension (A0: the processor feeds no view
# store: examples/bench/gpuviz.yaml). Runs alternate A0, A, B for PAIRS rounds; the table gives medians and
# the differences, in % of one core.
#
# Then the API's latency: after FILL seconds of data (900 = the full 15-minute
# retention), LATENCY_N full fetches back to back of range 15 min x 900
# columns and of range 5 min x 600 columns, p50/p99/max.
#
# Load: examples/loadgen --mode flood --match host at RATE spans/s (8
# simulated H200s at 1 s, vLLM spans), as in scripts/measure-processor.sh.
#
# Environment (defaults): RATE (200), PAIRS (3), SECONDS (60), WARMUP (15),
# FILL (900; 0 skips the latency part), LATENCY_N (200), BIN
# (_build/otelcol-gpuviz), BENCH_OTLP_PORT (4317), BENCH_TELEMETRY_PORT (8888),
# BENCH_VIEW_PORT (8787). A view fetch that fails or takes over 10 s (viewload's
# -timeout) fails the run.
#
#   make build && scripts/measure-view.sh
#   PAIRS=1 SECONDS=10 FILL=30 scripts/measure-view.sh   # a smoke run
set -euo pipefail
run_s=$(printenv SECONDS || true)
run_s=${MEASURE_SECONDS:-${run_s:-60}}
cd "$(dirname "$0")/.."
rate=${RATE:-200} pairs=${PAIRS:-3} warmup=${WARMUP:-15} fill=${FILL:-900} latency_n=${LATENCY_N:-200}
bin=${BIN:-_build/otelcol-gpuviz}
export BENCH_OTLP_PORT=${BENCH_OTLP_PORT:-4317} BENCH_TELEMETRY_PORT=${BENCH_TELEMETRY_PORT:-8888} BENCH_VIEW_PORT=${BENCH_VIEW_PORT:-8787}
hz=$(getconf CLK_TCK)
die() { echo "measure-view: FAILED: $*" >&2; [ -n "${clog:-}" ] && [ -s "$clog" ] && tail -n 20 "$clog" >&2; exit 1; }
for n in "$run_s" "$pairs" "$warmup" "$rate" "$latency_n"; do
  [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "RATE, SECONDS, PAIRS, WARMUP and LATENCY_N must be positive integers"
done
[[ $fill =~ ^[0-9]+$ ]] || die "FILL must be a whole number of seconds"
[ -x "$bin" ] || die "$bin not built (make build), or set BIN"

work=$(mktemp -d "${TMPDIR:-/tmp}/measure-view.XXXXXX")
cpid="" lpid="" vpid=""
cleanup() {
  for p in $vpid $lpid $cpid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# scripts/measure-view.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "command: RATE=$rate PAIRS=$pairs SECONDS=$run_s WARMUP=$warmup FILL=$fill LATENCY_N=$latency_n scripts/measure-view.sh"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)'); $(nproc) CPUs: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
go build -o "$work/loadgen" ./examples/loadgen || die "go build ./examples/loadgen"
go build -o "$work/viewload" ./scripts/viewload || die "go build ./scripts/viewload"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
alive() { kill -0 "$1" 2>/dev/null; }
view() { echo "http://127.0.0.1:$BENCH_VIEW_PORT"; }
# latency RANGE COLUMNS: one line of latencies of full fetches, or the run
# fails with the viewer's error.
latency() {
  local out
  out=$("$work/viewload" --url "$(view)" --mode latency --range "$1" --columns "$2" --n "$latency_n" 2> "$work/viewload.err") ||
    die "latency: the viewer failed (range $1 s, $2 columns): $(cat "$work/viewload.err")"
  echo "  range $1 s, $2 columns: $out"
}

# start variant: the collector and the load generator, warmed up.
start() {
  local cfg=examples/bench/view.yaml
  [ "$1" = A0 ] && cfg=examples/bench/gpuviz.yaml
  clog=$work/collector-$1.log
  "$bin" --config "$cfg" > "$clog" 2>&1 &
  cpid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    alive "$cpid" || die "$1: the collector exited while starting"
    curl -sf --max-time 2 "http://127.0.0.1:$BENCH_TELEMETRY_PORT/metrics" > /dev/null && break
    sleep 0.1
  done
  "$work/loadgen" --mode flood --rate "$rate" --match host --families vllm --endpoint "127.0.0.1:$BENCH_OTLP_PORT" \
    --duration 24h > /dev/null 2> "$work/loadgen-$1.log" &
  lpid=$!
}
stop_all() {
  for p in $vpid $lpid $cpid; do kill "$p" 2>/dev/null || true; done
  wait $vpid $lpid $cpid 2>/dev/null || true
  vpid="" lpid="" cpid=""
}

results=$work/results.tsv
: > "$results"
echo
echo "CPU at $rate spans/s: $pairs rounds of A0 (no view), A (view, nobody looking), B (view, one viewer); ${run_s} s each after ${warmup} s"
for ((round = 1; round <= pairs; round++)); do
  for variant in A0 A B; do
    start "$variant"
    sleep "$warmup"
    if [ "$variant" = B ]; then
      "$work/viewload" --url "$(view)" --mode poll --range 300 --columns 600 --duration "$((run_s + 5))s" > "$work/viewload.out" 2> "$work/viewload.err" &
      vpid=$!
      sleep 1
    fi
    alive "$cpid" || die "$variant: the collector exited"
    c0=$(ticks "$cpid") t0=$(date +%s.%N)
    sleep "$run_s"
    alive "$cpid" || die "$variant: the collector exited during the run"
    c1=$(ticks "$cpid") t1=$(date +%s.%N)
    hwm=$(awk '/^VmHWM/{print $2}' "/proc/$cpid/status")
    if [ -n "$vpid" ]; then
      wait "$vpid" || die "B: the viewer failed: $(cat "$work/viewload.err")"
      vpid=""
    fi
    stop_all
    awk -v v="$variant" -v k="$round" -v c="$((c1 - c0))" -v hz="$hz" -v t0="$t0" -v t1="$t1" -v h="$hwm" \
      'BEGIN { printf "%s\t%s\t%.3f\t%d\n", v, k, 100 * c / hz / (t1 - t0), h }' >> "$results"
    tail -n 1 "$results" | awk -F'\t' '{ printf "  %-2s round %s: collector %5.2f%% of a core, peak RSS %6.1f MiB\n", $1, $2, $3, $4 / 1024 }'
  done
done
median() { # variant column
  awk -F'\t' -v v="$1" -v c="$2" '$1 == v { print $c }' "$results" | sort -g |
    awk '{ x[n++] = $1 } END { print (n % 2 ? x[(n - 1) / 2] : (x[n / 2 - 1] + x[n / 2]) / 2) }'
}
a0=$(median A0 3) a=$(median A 3) b=$(median B 3)
echo
echo "| variant | collector CPU, % of a core (median) | peak RSS MiB (median) |"
echo "|---|---|---|"
for v in A0 A B; do
  printf '| %s | %.2f | %.1f |\n' "$v" "$(median "$v" 3)" "$(awk -v k="$(median "$v" 4)" 'BEGIN { print k / 1024 }')"
done
awk -v a0="$a0" -v a="$a" -v b="$b" 'BEGIN {
  printf "\nthe view store, fed, nobody looking (A - A0): %+.2f%% of a core\none viewer (B - A): %+.2f%% of a core\n", a - a0, b - a }'

if ((fill > 0)); then
  echo
  echo "latency: $fill s of data, then $latency_n full fetches back to back"
  start A
  sleep "$fill"
  alive "$cpid" || die "latency: the collector exited while filling"
  latency 900 900
  latency 300 600
  stop_all
fi
