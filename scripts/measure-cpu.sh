#!/usr/bin/env bash
# CPU and memory of otelcol-gpuviz on the quickstart config (8 simulated H200s, 10 s interval):
# MEASURE_SECONDS (default 120) measured after a 10 s warm-up, from /proc/<pid>/stat. Build
# first (make build); BIN names another binary (an old build, to compare). Extra arguments go
# to the collector, e.g.
#   scripts/measure-cpu.sh --set=receivers::gpuviz::simulated::scenario=sequential
cd "$(dirname "$0")/.."
seconds=${MEASURE_SECONDS:-120}
"${BIN:-_build/otelcol-gpuviz}" --config examples/quickstart/config.yaml "$@" > /dev/null 2>&1 &
pid=$!
sleep 10
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
sleep "$seconds"
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
kill $pid
wait $pid 2>/dev/null
hz=$(getconf CLK_TCK)
echo "cpu_seconds=$(echo "scale=3; ($t1-$t0)/$hz" | bc) over $seconds s; percent_of_core=$(echo "scale=3; 100*($t1-$t0)/$hz/$seconds" | bc); rss_kib=$rss; peak_rss_kib=$hwm"
