# Tollgate. `make run` starts the all-in-one gateway, `make test` runs every test.
GO ?= go
BIN := bin
# Every build and test here turns on Go's experimental SIMD package, which
# the request-body scan's vector string reader uses (docs/development.md);
# `GOEXPERIMENT= make build` builds the portable reader only.
export GOEXPERIMENT ?= simd

.PHONY: run test build proto fmt vet clean

## run: the gateway in all-in-one mode with the development config
run:
	$(GO) run -tags embed ./services/gateway -embed -config deploy/dev/tollgate.yaml

## test: install test dependencies, gofmt, go vet, golangci-lint, go test -race ./... (and the portable body scan, and the replicated ClickHouse tests), then every fuzz target for 3s (FUZZ_BUDGET=300s in all)
test:
	scripts/test.sh

.PHONY: lint
## lint: golangci-lint (the version scripts/deps.sh installs) with .golangci.yml; make test runs it
lint:
	scripts/lint.sh

.PHONY: console-screenshots
## console-screenshots: run the console's browser test (headless chromium, with ClickHouse) and rewrite its PNGs in docs/console/
console-screenshots:
	scripts/deps.sh
	$(GO) test -tags clickhouse,embed -run '^TestConsoleInBrowser$$' -count=1 ./services/gateway -update-screenshots

.PHONY: fuzz
FUZZTIME ?= 30s
## fuzz: every fuzz target for FUZZTIME each (30s; make test runs them for 3s): make fuzz FUZZTIME=2m
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

## build: every program into bin/, and bin/gateway-embed, the gateway built with -tags embed (for -embed)
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./services/...
	$(GO) build -tags embed -o $(BIN)/gateway-embed ./services/gateway

.PHONY: stack stack-down
## stack: NATS, ClickHouse, gateway, budget and analytics on this machine under .stack/ (no Docker)
stack:
	scripts/stack/up.sh

## stack-down: stop what make stack started (.stack/pids)
stack-down:
	scripts/stack/down.sh

.PHONY: test-cluster
## test-cluster: the replicated ClickHouse tests (ZooKeeper and two 18.16 replicas, migrated ON CLUSTER, usage batches loaded from JetStream, each replica SIGKILLed mid-insert; a loader killed with its replica; two shards read through the Distributed tables; about 2 minutes; make test runs them too; RELIABILITY.md)
test-cluster:
	scripts/deps.sh
	$(GO) test -count=1 -tags chcluster -run '^TestCluster' -timeout 10m -v ./pkg/chstore

.PHONY: test-chaos
## test-chaos: fault scenarios on a multi-node rig (3 NATS nodes, 2 gateways, ClickHouse); one with SCENARIO=nats-down; another nats-server with NATS_SERVER=/usr/bin/nats-server (about 10 minutes; see RELIABILITY.md)
test-chaos:
	scripts/deps.sh
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/chaos ./scripts/chaos
	$(BIN)/chaos -scenario "$(SCENARIO)" $(if $(NATS_SERVER),-nats-server "$(NATS_SERVER)")

.PHONY: bench bench-soak
## bench: the benchmark suite (direct, bareproxy, tollgate; about 17 minutes): BENCHMARKS.md, docs/bench/
bench:
	scripts/bench/run.sh

## bench-soak: 200 streams/s of ~1.2 s answers for 3 minutes through the gateway, added to BENCHMARKS.md
bench-soak:
	scripts/bench/run.sh -soak

.PHONY: bench-dashboards
EVENTS ?= 1000000
## bench-dashboards: EVENTS synthetic usage events (1000000; 30 days, 300 depts, 3000 teams, 5000 keys, 30 models) through the stream and the analytics loader into ClickHouse 18.16, then every dashboard panel timed over the 30 days: docs/bench/dashboards-EVENTS.md (docs/performance.md)
bench-dashboards:
	scripts/deps.sh
	$(GO) test -tags chscale -run TestScale -count=1 -timeout 4h -v ./dashboards -args -scale.events=$(EVENTS) -scale.out $(CURDIR)/docs/bench/dashboards-$(EVENTS).md

.PHONY: bench-console
CONSOLE_EVENTS ?= 10000000
## bench-console: CONSOLE_EVENTS synthetic usage events (10000000; the history of bench-dashboards) into ClickHouse 18.16, then each console page's server time (BenchmarkPages, pkg/console; docs/performance.md); CONSOLE_CLICKHOUSE=host:port keeps the events in that server for the next run
bench-console:
	scripts/deps.sh
	$(GO) test -tags chscale -run '^$$' -bench BenchmarkPages -benchtime 20x -timeout 4h ./pkg/console -args -pages.events=$(CONSOLE_EVENTS) $(if $(CONSOLE_CLICKHOUSE),-pages.clickhouse=$(CONSOLE_CLICKHOUSE))

.PHONY: docs
## docs: regenerate every generated doc: docs/configuration.md (from pkg/config), the restart-only key list of docs/operations.md (from config.Keys), docs/tollctl.md (from the tollctl commands) and the parameter-policy tables of docs/providers.md (from each translating kind's Policy); a test fails when one is stale
docs:
	$(GO) run ./pkg/config/configdoc/gen
	$(GO) run ./pkg/providers/policydoc/gen
	$(GO) test ./pkg/config -run '^TestRestartKeyList$$' -count=1 -update
	$(GO) run ./services/tollctl gen-docs docs/tollctl.md

## proto: regenerate the Go code of proto/
proto:
	scripts/proto.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
