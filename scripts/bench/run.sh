#!/usr/bin/env bash
# The benchmark suite (`make bench`, `make bench-soak`): installs nats-server
# when it is missing, builds the orchestrator and runs it from the
# repository root. Arguments go to the orchestrator (see -h), e.g.
#   scripts/bench/run.sh -soak
#   scripts/bench/run.sh -only 'nonstream' -reps 1
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v nats-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bench: installing nats-server"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
  else
    echo "bench: nats-server is missing (apt-get install nats-server)" >&2
    exit 1
  fi
fi
if ! command -v taskset >/dev/null 2>&1; then
  echo "bench: taskset not found (util-linux): processes will not be pinned to CPUs" >&2
fi

# Go's experimental SIMD package for the request-body scan, as the Makefile
# sets it (GOEXPERIMENT= for the portable build).
export GOEXPERIMENT="${GOEXPERIMENT-simd}"
mkdir -p bench-results/bin
go build -o bench-results/bin/benchrun ./scripts/bench/cmd/benchrun
# exec: an interrupt reaches the orchestrator, which stops what it started.
exec bench-results/bin/benchrun "$@"
