#!/usr/bin/env bash
# The one test command (`make test`): installs what the tests need (also
# chromium and axe-core for the console's browser tests), checks
# formatting and vet, then runs every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

# Go's experimental SIMD package for the request-body scan, as the Makefile
# sets it (GOEXPERIMENT= for the portable build).
export GOEXPERIMENT="${GOEXPERIMENT-simd}"
scripts/deps.sh
export PATH="$PATH:$(go env GOPATH)/bin"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...
go vet -tags clickhouse,embed ./services/gateway # the gateway's optional ClickHouse lookups and embedded NATS
GOEXPERIMENT= go vet ./pkg/rawjson # the portable build of the body scan
go vet -tags chdb ./dashboards # the dual-version SQL test
go vet -tags chcluster ./pkg/chstore # the replicated cluster test

echo "== golangci-lint"
scripts/lint.sh

echo "== go test"
go test -race -count=1 -timeout 15m ./...
go test -race -count=1 -tags clickhouse,embed ./services/gateway # -embed with its NATS server and the analytics loaders; the console's browser test with ClickHouse history
GOEXPERIMENT= go test -count=1 ./pkg/rawjson # the body scan without the vector reader
go test -count=1 -tags chdb -run TestVersions ./dashboards # every SQL statement on ClickHouse 18.16 and 26.x (chDB)
go test -count=1 -tags chcluster -run '^TestCluster' -timeout 10m ./pkg/chstore # a replicated cluster, a replica killed mid-load (make test-cluster)
FUZZ_BUDGET=${FUZZ_BUDGET:-300} scripts/fuzz.sh # every fuzz target, FUZZTIME (3s) each, 5 minutes at most
