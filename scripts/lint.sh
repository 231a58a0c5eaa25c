#!/usr/bin/env bash
# golangci-lint with the repo's .golangci.yml, at the version scripts/deps.sh
# installs (`make lint`; `make test` runs it after go vet).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOEXPERIMENT="${GOEXPERIMENT-simd}"
want=2.15.0
for bin in golangci-lint "$(go env GOPATH)/bin/golangci-lint"; do
  if "$bin" version 2>/dev/null | grep -q "version $want "; then
    exec "$bin" run ./...
  fi
done
echo "lint: golangci-lint $want is not installed: run scripts/deps.sh" >&2
exit 1
