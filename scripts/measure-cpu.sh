#!/usr/bin/env bash
# CPU and memory of otelcol-gpuviz on the quickstart config (8 simulated H200s, 10 s interval):
# 120 s measured after a 10 s warm-up, from /proc/<pid>/stat. Build first (make build).
cd "$(dirname "$0")/.."
_build/otelcol-gpuviz --config examples/quickstart/config.yaml > /dev/null 2>&1 &
pid=$!
sleep 10
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
sleep 120
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
kill $pid
hz=$(getconf CLK_TCK)
echo "cpu_seconds=$(echo "scale=3; ($t1-$t0)/$hz" | bc) over 120 s; percent_of_core=$(echo "scale=3; 100*($t1-$t0)/$hz/120" | bc); rss_kib=$rss"
