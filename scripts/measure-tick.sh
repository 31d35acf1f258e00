#!/usr/bin/env bash
# Where the sampling clock's CPU goes, on a machine with NVIDIA GPUs
# (docs/hardware.md, "What a tick costs"). Runs the collector (gpuviz
# receiver on NVML, debug exporter at basic verbosity, the receiver's default
# 10 s collection interval) with the sampling clock off, on at INTERVAL, and
# on with one group of the tick's reads turned off at a time, alternated for
# ROUNDS rounds; CPU from /proc/<pid>/stat (utime+stime) over WINDOW seconds
# after 4 s of start-up, as % of one core. Then, with the clock on, a CPU
# profile of PROFILE_SECONDS through the pprof extension (tick.pprof, read it
# with `go tool pprof -top tick.pprof`; at ~1% of a core, 15 s holds ~15
# samples, so give it a minute or more to say anything).
#
# Environment (defaults): BIN (_build/otelcol-gpuviz), INTERVAL (250ms),
# WINDOW (12), ROUNDS (2), VARIANTS (all: samples_off tick no_energy
# no_throttle no_power no_gpm), PROFILE (1; 0 skips it), PROFILE_SECONDS
# (15), OUT (_build; writes OUT/tick-cost/). Exits 1, naming the variant and
# showing its log's last lines, when a collector is not running where its CPU
# is read or its profile taken (without NVML, the nvml backend fails at start).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
bin=${BIN:-_build/otelcol-gpuviz}
interval=${INTERVAL:-250ms}
window=${WINDOW:-12}
rounds=${ROUNDS:-2}
dir=${OUT:-_build}/tick-cost
mkdir -p "$dir"
[ -x "$bin" ] || { echo "measure-tick: $bin not built (make build), or set BIN" >&2; exit 2; }

# config VARIANT: the collector's configuration for one variant; each turns
# off one group of the tick's reads (its metrics disabled).
config() {
  local samples=true metrics=()
  case $1 in
    samples_off) samples=false ;;
    tick) ;;
    no_energy) metrics=(hw.energy) ;;
    no_throttle) metrics=(nvidia.gpu.throttle.time) ;;
    no_power) metrics=(hw.power) ;;
    no_gpm) metrics=(nvidia.gpu.sm.activity nvidia.gpu.tensor.activity nvidia.gpu.dram.activity
      nvidia.gpu.pipe.activity nvidia.gpu.sm.occupancy nvidia.gpu.pcie.throughput nvidia.gpu.nvlink.throughput) ;;
  esac
  printf 'receivers:\n  gpuviz:\n    backend: nvml\n'
  printf '    samples: {enabled: %s, interval: %s, flush_interval: 1s}\n' "$samples" "$interval"
  if [ ${#metrics[@]} -gt 0 ]; then
    printf '    metrics:\n'
    printf '      %s: {enabled: false}\n' "${metrics[@]}"
  fi
  printf '%s\n' 'exporters:' '  debug: {verbosity: basic}' 'extensions:' '  pprof: {endpoint: "127.0.0.1:17770"}' \
    'service:' '  extensions: [pprof]' '  telemetry: {metrics: {level: none}}' '  pipelines:' \
    '    metrics: {receivers: [gpuviz], exporters: [debug]}'
}
read -ra order <<<"${VARIANTS:-samples_off tick no_energy no_throttle no_power no_gpm}"
hz=$(getconf CLK_TCK)
# ticks RUN LOG: the CPU ticks of the collector $pid, still running; or the
# script fails, naming the run and showing the end of the collector's log.
ticks() {
  cpu_ticks "$pid" && return
  echo "measure-tick: $1: the collector exited; the end of $2:" >&2
  tail -n 20 "$2" >&2
  exit 1
}

for v in "${order[@]}"; do config "$v" >"$dir/$v.yaml"; done
printf '%-12s %5s %8s\n' variant round "% core"
for r in $(seq "$rounds"); do
  for v in "${order[@]}"; do
    "$bin" --config "$dir/$v.yaml" >"$dir/$v-$r.log" 2>&1 &
    pid=$!
    sleep 4
    a=$(ticks "variant $v, round $r" "$dir/$v-$r.log")
    sleep "$window"
    b=$(ticks "variant $v, round $r" "$dir/$v-$r.log")
    kill "$pid"
    wait "$pid" || true
    grep -q '"resource metrics"' "$dir/$v-$r.log" || {
      echo "measure-tick: $v exported nothing; see $dir/$v-$r.log" >&2
      tail -5 "$dir/$v-$r.log" >&2
    }
    awk -v v="$v" -v r="$r" -v d=$((b - a)) -v hz="$hz" -v w="$window" \
      'BEGIN { printf "%-12s %5s %7.2f%%\n", v, r, 100 * d / hz / w }'
  done
done

[ "${PROFILE:-1}" != 0 ] || exit 0
config tick >"$dir/tick.yaml"
"$bin" --config "$dir/tick.yaml" >"$dir/profile.log" 2>&1 &
pid=$!
sleep 4
ticks "the profile's run" "$dir/profile.log" >/dev/null
python3 -c "import urllib.request,sys; open(sys.argv[1],'wb').write(urllib.request.urlopen('http://127.0.0.1:17770/debug/pprof/profile?seconds='+sys.argv[2], timeout=int(sys.argv[2])+30).read())" "$dir/tick.pprof" "${PROFILE_SECONDS:-15}" ||
  echo "measure-tick: no profile" >&2
ticks "the profile's run" "$dir/profile.log" >/dev/null
kill "$pid"
wait "$pid" || true
echo "profile: $dir/tick.pprof"
