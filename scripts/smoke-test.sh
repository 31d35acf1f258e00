#!/usr/bin/env bash
# Runs the built otelcol-gpuviz on the quickstart config for a few seconds and
# checks that the standard GPU metrics come out, both through the debug
# exporter and on the Prometheus endpoint. On a machine without an NVIDIA
# driver the receiver runs on the simulated backend (auto), and the check also
# requires that the data says so.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${BIN:-_build/otelcol-gpuviz}
config=examples/quickstart/config.yaml
log=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; [ -n "${KEEP_LOG:-}" ] && cp "$log" "$KEEP_LOG"; rm -f "$log"' EXIT

"$bin" --config "$config" \
  --set=receivers::gpuviz::collection_interval=1s \
  --set=processors::batch::timeout=200ms \
  --set=exporters::debug::verbosity=detailed >"$log" 2>&1 &
pid=$!

names=(hw.gpu.utilization hw.gpu.memory.usage hw.gpu.memory.limit hw.gpu.memory.utilization
  hw.power hw.energy hw.temperature hw.status nvidia.gpu.info nvidia.gpu.clock.frequency
  hw.gpu.io hw.errors nvidia.gpu.throttle.active nvidia.gpu.throttle.time nvidia.gpu.process.memory.usage)
deadline=$((SECONDS + 30))
missing=("${names[@]}")
while ((SECONDS < deadline)); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "smoke test: the collector exited early:" >&2
    cat "$log" >&2
    exit 1
  fi
  missing=()
  for n in "${names[@]}"; do
    grep -q -- "-> Name: $n\$" "$log" || missing+=("$n")
  done
  ((${#missing[@]} == 0)) && break
  sleep 1
done
if ((${#missing[@]} > 0)); then
  echo "smoke test: metrics never came out: ${missing[*]}" >&2
  tail -50 "$log" >&2
  exit 1
fi

if grep -q "falls back to the SIMULATED backend" "$log"; then
  grep -q -- "-> gpuviz.backend: Str(simulated)" "$log" || {
    echo "smoke test: simulated data is not marked gpuviz.backend=simulated" >&2
    exit 1
  }
  # The simulated H200s have GPM, which needs two scrapes.
  until grep -q -- "-> Name: nvidia.gpu.tensor.activity$" "$log"; do
    ((SECONDS < deadline + 10)) || { echo "smoke test: no GPM activity from the simulated H200s" >&2; exit 1; }
    sleep 1
  done
  backend=simulated
else
  backend=nvml
fi

# An inference span as vLLM sends it, over OTLP/HTTP: the gpuviz processor
# must hold it until the GPU samples covering its end arrive, then enrich it
# and add its phase spans.
now=$(date +%s%N)
start=$((now - 4000000000))
end=$((now - 1000000000))
curl -fsS -o /dev/null -H 'Content-Type: application/json' http://127.0.0.1:4318/v1/traces -d '{
  "resourceSpans": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]},
    "scopeSpans": [{
      "scope": {"name": "vllm.llm_engine"},
      "spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
        "name": "llm_request", "kind": 2,
        "startTimeUnixNano": "'"$start"'", "endTimeUnixNano": "'"$end"'",
        "attributes": [
          {"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 0.5}},
          {"key": "gen_ai.latency.time_in_model_prefill", "value": {"doubleValue": 0.5}},
          {"key": "gen_ai.latency.time_in_model_decode", "value": {"doubleValue": 2.0}},
          {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "512"}},
          {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "128"}},
          {"key": "gen_ai.request.model", "value": {"stringValue": "meta-llama/Llama-3.1-8B-Instruct"}}
        ]
      }]
    }]
  }]
}'
until grep -q -- "-> gpuviz.energy: Double(" "$log" && grep -q "Name           : gpu.decode" "$log"; do
  ((SECONDS < deadline + 20)) || {
    echo "smoke test: the vLLM span was not enriched by the gpuviz processor" >&2
    grep -n "llm_request\|gpuviz" "$log" | tail -20 >&2
    exit 1
  }
  sleep 1
done

prom=$(curl -fsS http://127.0.0.1:8889/metrics)
for series in hw_power_watts hw_energy_joules_total hw_gpu_utilization_ratio gpuviz_gpu_bottleneck_time_seconds_total; do
  grep -q "^$series{" <<<"$prom" || {
    echo "smoke test: $series is not on the Prometheus endpoint" >&2
    grep '^hw_' <<<"$prom" | cut -d'{' -f1 | sort -u >&2
    exit 1
  }
done
gpus=$(grep -c '^nvidia_gpu_info_ratio{' <<<"$prom" || true)
echo "smoke test passed: backend=$backend, $gpus GPUs, ${#names[@]} metric names in the debug output and on the Prometheus endpoint, a vLLM span enriched with GPU energy and phase spans"
