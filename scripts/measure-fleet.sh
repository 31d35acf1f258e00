#!/usr/bin/env bash
# CPU per span at the agent and at the gateway, for the two multi-node
# topologies (docs/fleet.md), end to end through the built collector (make
# build), under a fixed span rate from one host:
#
#   agent   the agent joins: examples/bench/agent-join.yaml (receiver +
#           gpuviz processor) -> examples/bench/gateway-pass.yaml (OTLP -> debug)
#   gateway the gateway joins: examples/bench/agent-route.yaml (receiver +
#           hostrouting) -> examples/bench/gateway.yaml (OTLP -> gpuviz -> debug)
#
# Load: examples/loadgen --mode flood --match host --families vllm at RATE
# spans/s into the agent. Per run, after WARMUP s: each collector's CPU
# seconds over SECONDS (utime+stime), the spans the agent's receiver
# accepted, CPU us per span at each tier, and each one's peak RSS. The two
# topologies alternate for PAIRS rounds; the table gives medians.
#
# Environment (defaults): RATES ("2000"), PAIRS (3), SECONDS (45), WARMUP (10),
# BIN (_build/otelcol-gpuviz); ports 4317/8888 (agent) and 4319/8889 (gateway).
#
#   make build && scripts/measure-fleet.sh
set -euo pipefail
run_s=$(printenv SECONDS || true)
run_s=${MEASURE_SECONDS:-${run_s:-45}}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

rates=${RATES:-2000}
pairs=${PAIRS:-3}
warmup=${WARMUP:-10}
bin=${BIN:-_build/otelcol-gpuviz}
hz=$(getconf CLK_TCK)
die() { echo "measure-fleet: FAILED: $*" >&2; for l in "${alog:-}" "${glog:-}"; do [ -n "$l" ] && tail -n 15 "$l" >&2; done; exit 1; }
[ -x "$bin" ] || die "$bin not built (make build), or set BIN"

work=$(mktemp -d "${TMPDIR:-/tmp}/measure-fleet.XXXXXX")
apid="" gpid="" lpid=""
cleanup() {
  for p in "$lpid" "$apid" "$gpid"; do [ -n "$p" ] && { stop "$p" || true; }; done
  if [ -n "${KEEP:-}" ]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# scripts/measure-fleet.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "command: RATES=\"$rates\" PAIRS=$pairs SECONDS=$run_s WARMUP=$warmup scripts/measure-fleet.sh"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)');" \
  "$(nproc) CPUs: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
go build -o "$work/loadgen" ./examples/loadgen || die "go build ./examples/loadgen"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
scrape() { curl -sf --max-time 5 "http://127.0.0.1:$1/metrics" > "$work/metrics"; }
accepted() { scrape 8888 && metric_sum otelcol_receiver_accepted_spans < "$work/metrics"; }
ready() { local i; for ((i = 0; i < 300; i++)); do scrape "$1" && return 0; sleep 0.1; done; return 1; }

results=$work/results.tsv
: > "$results"
run_one() { # topology rate round
  local topo=$1 rate=$2 round=$3 acfg gcfg
  case $topo in
    agent) acfg=examples/bench/agent-join.yaml gcfg=examples/bench/gateway-pass.yaml ;;
    gateway) acfg=examples/bench/agent-route.yaml gcfg=examples/bench/gateway.yaml ;;
  esac
  glog=$work/gateway-$topo-$rate-$round.log alog=$work/agent-$topo-$rate-$round.log
  BENCH_OTLP_PORT=4319 BENCH_TELEMETRY_PORT=8889 "$bin" --config "$gcfg" > "$glog" 2>&1 &
  gpid=$!
  ready 8889 || die "$topo: the gateway did not start"
  BENCH_OTLP_PORT=4317 BENCH_GATEWAY_PORT=4319 BENCH_TELEMETRY_PORT=8888 "$bin" --config "$acfg" > "$alog" 2>&1 &
  apid=$!
  ready 8888 || die "$topo: the agent did not start"
  "$work/loadgen" --mode flood --rate "$rate" --match host --families vllm \
    --endpoint 127.0.0.1:4317 --duration "$((warmup + run_s + 60))s" > /dev/null 2> "$work/loadgen.log" &
  lpid=$!
  sleep "$warmup"
  local a0 g0 s0 t0 a1 g1 s1 t1
  # One assignment per line: in a line of several, only the last one's
  # status counts, and a failed scrape read as 0 spans at the start.
  s0=$(accepted) || die "$topo: the agent's telemetry scrape failed"
  a0=$(ticks "$apid") || die "$topo: the agent exited"
  g0=$(ticks "$gpid") || die "$topo: the gateway exited"
  t0=$(date +%s.%N)
  sleep "$run_s"
  s1=$(accepted) || die "$topo: the agent's telemetry scrape failed"
  a1=$(ticks "$apid") || die "$topo: the agent exited"
  g1=$(ticks "$gpid") || die "$topo: the gateway exited"
  t1=$(date +%s.%N)
  local ahwm ghwm
  ahwm=$(awk '/^VmHWM/{print $2}' "/proc/$apid/status") ghwm=$(awk '/^VmHWM/{print $2}' "/proc/$gpid/status")
  stop "$lpid" || die "$topo: the load generator failed"
  lpid=""
  stop "$apid" || die "$topo: the agent exited badly"
  apid=""
  stop "$gpid" || die "$topo: the gateway exited badly"
  gpid=""
  local n=$((s1 - s0))
  ((n > 0)) || die "$topo: no spans accepted"
  awk -v t="$topo" -v r="$rate" -v k="$round" -v el="$(echo "$t1 - $t0" | bc)" -v n="$n" -v a="$((a1 - a0))" -v g="$((g1 - g0))" \
    -v hz="$hz" -v ah="$ahwm" -v gh="$ghwm" 'BEGIN {
      printf "%s\t%s\t%s\t%.1f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\n", t, r, k, n / el, 1e6 * a / hz / n, 1e6 * g / hz / n, 1e6 * (a + g) / hz / n, ah / 1024, gh / 1024, 100 * a / hz / el, 100 * g / hz / el }' >> "$results"
  tail -n 1 "$results" | awk -F'\t' '{ printf "  %-7s round %s: %6.0f spans/s; agent %5.2f us/span (%4.1f%% of a core, peak %5.1f MiB), gateway %5.2f us/span (%4.1f%%, peak %5.1f MiB), both %5.2f\n", $1, $3, $4, $5, $10, $8, $6, $11, $9, $7 }'
}

for rate in $rates; do
  echo
  echo "rate $rate spans/s: $pairs rounds of agent, gateway; ${run_s} s each after ${warmup} s"
  for ((round = 1; round <= pairs; round++)); do
    run_one agent "$rate" "$round"
    run_one gateway "$rate" "$round"
  done
done
median() {
  awk -F'\t' -v t="$1" -v r="$2" -v c="$3" '$1 == t && $2 == r { print $c }' "$results" | sort -g |
    awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
echo
echo "## Results: medians of $pairs runs"
printf "| rate | joins at | spans/s | agent us/span | gateway us/span | both us/span | agent peak MiB | gateway peak MiB |\n|---:|---|---:|---:|---:|---:|---:|---:|\n"
for rate in $rates; do
  for topo in agent gateway; do
    printf "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.1f | %.1f |\n" "$rate" "$topo" "$(median $topo "$rate" 4)" "$(median $topo "$rate" 5)" \
      "$(median $topo "$rate" 6)" "$(median $topo "$rate" 7)" "$(median $topo "$rate" 8)" "$(median $topo "$rate" 9)"
  done
  awk -v aa="$(median agent "$rate" 5)" -v ga="$(median gateway "$rate" 5)" -v gg="$(median gateway "$rate" 6)" -v ab="$(median agent "$rate" 7)" -v gb="$(median gateway "$rate" 7)" \
    'BEGIN { printf "\nrate %s: the routing agent costs %.2fx the joining agent per span; the joining gateway %.2fx the joining agent; both tiers %.2fx\n", '"$rate"', ga / aa, gg / aa, gb / ab }'
done
