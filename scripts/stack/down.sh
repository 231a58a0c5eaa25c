#!/usr/bin/env bash
# make stack-down: stops the processes make stack started (listed in
# .stack/pids), services first, then ClickHouse and NATS; keeps the data.
# Waits at most 15 s per process before SIGKILL.
set -uo pipefail
cd "$(dirname "$0")/../.."
P=.stack/pids
if [ ! -s "$P" ]; then
  echo "stack: nothing to stop (no .stack/pids)"
  exit 0
fi
# Reverse start order: gateway, budget, analytics, mockllm, clickhouse, nats.
tac "$P" | while read -r pid name; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "stack: $name ($pid) already gone"
    continue
  fi
  kill -TERM "$pid"
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "stack: $name ($pid) did not stop; killing"
    kill -KILL "$pid"
  fi
  echo "stack: stopped $name ($pid)"
done
rm -f "$P"
