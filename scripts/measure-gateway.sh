#!/usr/bin/env bash
# What one gateway replica of the gateway-joining topology (docs/fleet.md)
# holds per host, end to end through the built collector (make build): the
# GPU metrics of HOSTS simulated 8 x H200 hosts (cmd/gpuviz-fleetload: the
# gpuviz receiver in-process, each batch sent once per host, as the agents'
# hostrouting exporters would) into
#
#   A  examples/bench/gateway-baseline.yaml: OTLP/gRPC -> debug
#   B  examples/bench/gateway.yaml: OTLP/gRPC -> gpuviz -> debug, with
#      history.max_points_per_signal = POINTS and max_gpus = HOSTS x 8
#
# with SPANS vLLM spans per second per host (matched to all of the host's
# GPUs), alternating A, B for PAIRS rounds per (hosts, points). Each run lasts
# SECONDS, long enough for every series to reach POINTS points (the
# receiver's driver samples come 6 a second: POINTS / 6 s), then reads the
# collector's heap (otelcol_process_runtime_heap_alloc_bytes), RSS, peak
# RSS (VmHWM), CPU and the points its receiver accepted.
#
# Environment (defaults): HOSTS ("64 128"), POINTS ("512"), SPANS (5), PAIRS (2),
# SECONDS (120), INTERVAL (10s, the agents' collection_interval), BIN
# (_build/otelcol-gpuviz), BENCH_OTLP_PORT (4317), BENCH_TELEMETRY_PORT (8888);
# GOMEMLIMIT, when set, applies to both. Extra arguments go to B's runs, e.g.
# --set=processors::gpuviz::attribution::horizon=2m.
#
#   make build && scripts/measure-gateway.sh
set -euo pipefail
run_s=$(printenv SECONDS || true)
run_s=${MEASURE_SECONDS:-${run_s:-120}}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
extra=("$@")

hosts_list=${HOSTS:-64 128}
points_list=${POINTS:-512}
pairs=${PAIRS:-2}
spans=${SPANS:-5}
interval=${INTERVAL:-10s}
bin=${BIN:-_build/otelcol-gpuviz}
export BENCH_OTLP_PORT=${BENCH_OTLP_PORT:-4317}
export BENCH_TELEMETRY_PORT=${BENCH_TELEMETRY_PORT:-8888}
hz=$(getconf CLK_TCK)
die() { echo "measure-gateway: FAILED: $*" >&2; [ -n "${clog:-}" ] && tail -n 20 "$clog" >&2; exit 1; }
[ -x "$bin" ] || die "$bin not built (make build), or set BIN"

work=$(mktemp -d "${TMPDIR:-/tmp}/measure-gateway.XXXXXX")
cpid="" lpid=""
cleanup() {
  [ -n "$lpid" ] && { stop "$lpid" || true; }
  [ -n "$cpid" ] && { stop "$cpid" || true; }
  if [ -n "${KEEP:-}" ]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# scripts/measure-gateway.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "command: ${GOMEMLIMIT:+GOMEMLIMIT=$GOMEMLIMIT }HOSTS=\"$hosts_list\" POINTS=\"$points_list\" SPANS=$spans PAIRS=$pairs SECONDS=$run_s INTERVAL=$interval scripts/measure-gateway.sh${*:+ $*}"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)');" \
  "$(nproc) CPUs: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
go build -o "$work/fleetload" ./cmd/gpuviz-fleetload || die "go build ./cmd/gpuviz-fleetload"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
scrape() { curl -sf --max-time 5 "http://127.0.0.1:$BENCH_TELEMETRY_PORT/metrics" > "$work/metrics"; }
metric() { metric_sum "$@" < "$work/metrics"; }

results=$work/results.tsv
: > "$results"
run_one() { # variant hosts points round
  local variant=$1 hosts=$2 points=$3 round=$4 cfg args=()
  case $variant in
    A) cfg=examples/bench/gateway-baseline.yaml ;;
    B) cfg=examples/bench/gateway.yaml args=(--set=processors::gpuviz::history::max_points_per_signal="$points"
      --set=processors::gpuviz::history::max_gpus="$((hosts * 8))" "${extra[@]}") ;;
  esac
  clog=$work/collector-$variant-$hosts-$points-$round.log
  "$bin" --config "$cfg" "${args[@]}" > "$clog" 2>&1 &
  cpid=$!
  local i
  for ((i = 0; i < 300; i++)); do scrape && break; sleep 0.1; done
  scrape || die "$variant: no telemetry on :$BENCH_TELEMETRY_PORT"
  local c0 t0
  c0=$(ticks "$cpid") t0=$(date +%s.%N)
  "$work/fleetload" --hosts "$hosts" --interval "$interval" --duration "${run_s}s" --spans-per-host "$spans" \
    --endpoint "127.0.0.1:$BENCH_OTLP_PORT" > "$work/load.out" 2>&1 &
  lpid=$!
  local rc=0
  wait "$lpid" || rc=$?
  lpid=""
  ((rc == 0)) || die "$variant with $hosts hosts: the load failed: $(cat "$work/load.out")"
  local c1 t1
  c1=$(ticks "$cpid") t1=$(date +%s.%N)
  scrape || die "$variant: telemetry scrape failed"
  local heap rss hwm accepted gpus
  heap=$(metric otelcol_process_runtime_heap_alloc_bytes) rss=$(awk '/^VmRSS/{print $2}' "/proc/$cpid/status")
  hwm=$(awk '/^VmHWM/{print $2}' "/proc/$cpid/status") accepted=$(metric otelcol_receiver_accepted_metric_points)
  gpus=$(metric otelcol_processor_gpuviz_gpus)
  stop "$cpid" || die "$variant: the collector exited badly on SIGTERM"
  cpid=""
  awk -v v="$variant" -v h="$hosts" -v p="$points" -v k="$round" -v el="$(echo "$t1 - $t0" | bc)" -v c="$((c1 - c0))" -v hz="$hz" \
    -v heap="$heap" -v rss="$rss" -v hwm="$hwm" -v a="$accepted" -v g="$gpus" 'BEGIN {
      printf "%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.3f\t%d\n", v, h, p, k, heap / 1048576, rss / 1024, hwm / 1024, 100 * c / hz / el, a / el, 1e6 * c / hz / a, g }' >> "$results"
  tail -n 1 "$results" | awk -F'\t' '{ printf "  %s %4s hosts, %4s points, round %s: heap %7.1f MiB, RSS %7.1f MiB (peak %7.1f), %5.1f%% of a core, %7.0f points/s (%.2f us each), %s GPUs\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }'
}

for hosts in $hosts_list; do
  for points in $points_list; do
    echo
    echo "$hosts hosts x 8 GPUs, max_points_per_signal $points: $pairs rounds of A, B; ${run_s} s each"
    for ((round = 1; round <= pairs; round++)); do
      run_one A "$hosts" "$points" "$round"
      run_one B "$hosts" "$points" "$round"
    done
  done
done

median() { # variant hosts points column
  awk -F'\t' -v v="$1" -v h="$2" -v p="$3" -v c="$4" '$1 == v && $2 == h && $3 == p { print $c }' "$results" | sort -g |
    awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
echo
echo "## Results: medians of $pairs runs per cell"
printf "| hosts | points | A heap MiB | B heap MiB | B - A per host MiB | A RSS MiB | B RSS MiB | B/A RSS | B peak RSS MiB | hosts per GiB of B's RSS | B CPU %% | B us/point |\n"
printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
for hosts in $hosts_list; do
  for points in $points_list; do
    awk -v h="$hosts" -v p="$points" -v ah="$(median A "$hosts" "$points" 5)" -v bh="$(median B "$hosts" "$points" 5)" \
      -v ar="$(median A "$hosts" "$points" 6)" -v br="$(median B "$hosts" "$points" 6)" -v bp="$(median B "$hosts" "$points" 7)" \
      -v bc="$(median B "$hosts" "$points" 8)" -v bu="$(median B "$hosts" "$points" 10)" 'BEGIN {
        printf "| %d | %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2fx | %.1f | %.0f | %.1f | %.2f |\n", h, p, ah, bh, (bh - ah) / h, ar, br, br / ar, bp, h * 1024 / bp, bc, bu }'
  done
done
