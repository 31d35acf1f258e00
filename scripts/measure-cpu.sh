#!/usr/bin/env bash
# CPU and memory of otelcol-gpuviz on the quickstart config (8 simulated H200s, 10 s interval):
# MEASURE_SECONDS (default 120) measured after a 10 s warm-up, from /proc/<pid>/stat. Build
# first (make build); BIN names another binary (an old build, to compare). Extra arguments go
# to the collector, e.g.
#   scripts/measure-cpu.sh --set=receivers::gpuviz::simulated::scenario=sequential
# Exits 1, printing no figures, when the collector is not running at either end of the window.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${MEASURE_SECONDS:-120}
[[ $seconds =~ ^[0-9]+$ ]] && ((seconds > 0)) || { echo "measure-cpu: MEASURE_SECONDS must be a positive integer" >&2; exit 1; }
bin=${BIN:-_build/otelcol-gpuviz}
[ -x "$bin" ] || { echo "measure-cpu: $bin not built (make build), or set BIN" >&2; exit 1; }
log=$(mktemp)
"$bin" --config examples/quickstart/config.yaml "$@" > "$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# ticks: utime + stime, in clock ticks, of a collector still running.
ticks() {
  cpu_ticks "$pid" || { echo "measure-cpu: the collector exited:" >&2; tail -n 20 "$log" >&2; exit 1; }
}
sleep 10
t0=$(ticks)
sleep "$seconds"
t1=$(ticks)
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
hz=$(getconf CLK_TCK)
echo "cpu_seconds=$(echo "scale=3; ($t1-$t0)/$hz" | bc) over $seconds s; percent_of_core=$(echo "scale=3; 100*($t1-$t0)/$hz/$seconds" | bc); rss_kib=$rss; peak_rss_kib=$hwm"
