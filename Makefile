# Tollgate. `make run` starts the all-in-one gateway, `make test` runs every test.
GO ?= go
BIN := bin

.PHONY: run test build proto fmt vet clean

## run: the gateway in all-in-one mode with the development config
run:
	$(GO) run ./services/gateway -embed -config deploy/dev/tollgate.yaml

## test: install test dependencies, gofmt, go vet, go test -race ./...
test:
	scripts/test.sh

## build: every program into bin/
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./services/...

## proto: regenerate the Go code of proto/
proto:
	scripts/proto.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
