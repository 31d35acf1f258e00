# Shared by the measurement scripts (source it): stopping a child process,
# reading its CPU time, and reading the collector's own metrics from a
# Prometheus exposition.

# stop PID [SECONDS]: TERM, then KILL after SECONDS (10); returns the exit
# status. PID must be a child of the calling shell.
stop() {
  local pid=$1 wait=${2:-10} i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < wait * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  return "$rc"
}

# cpu_ticks PID: utime + stime of PID, in clock ticks; status 1, printing
# nothing, when PID is not running (a child that exited, reaped by bash, has
# no /proc entry left to read).
cpu_ticks() {
  kill -0 "$1" 2>/dev/null || return 1
  awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || return 1
}

# metric_sum NAME [FILTER] < exposition: the sum over NAME's series whose
# labels contain FILTER (counters may carry _total).
metric_sum() {
  awk -v n="$1" -v f="${2:-}" '$1 !~ /^#/ { m = $1; sub(/\{.*/, "", m); if ((m == n || m == n "_total") && index($1, f)) s += $NF }
    END { printf "%.0f\n", s }'
}

# unenriched_reasons < exposition: the gpuviz processor's un-enriched spans
# by reason, as reason=count,...
unenriched_reasons() {
  awk '$1 ~ /^otelcol_processor_gpuviz_spans_unenriched(_total)?\{/ && match($1, /reason="[^"]*"/) {
    r = substr($1, RSTART + 8, RLENGTH - 9); s[r] += $NF } END { for (r in s) printf "%s%s=%.0f", (o++ ? "," : ""), r, s[r] }'
}
