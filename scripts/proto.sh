#!/usr/bin/env bash
# Regenerates the Go code for every .proto file under proto/.
# Needs protoc (e.g. apt-get install -y protobuf-compiler). Installs
# protoc-gen-go at the version of google.golang.org/protobuf in go.mod when it
# is missing or at another version, so generated code matches the runtime.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null 2>&1; then
	echo "proto.sh: protoc not found; install it (apt-get install -y protobuf-compiler)" >&2
	exit 1
fi

want=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
gobin=$(go env GOBIN)
if [ -z "$gobin" ]; then
	gobin="$(go env GOPATH)/bin"
fi
export PATH="$gobin:$PATH"

have=$(protoc-gen-go --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
	echo "proto.sh: installing protoc-gen-go $want (found: ${have:-none})" >&2
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@$want"
fi
# The fast marshal/size/unmarshal code the usage publisher and consumers use
# (usage_vtproto.pb.go); its header names the generator version.
vtproto=v0.6.0
if ! command -v protoc-gen-go-vtproto >/dev/null 2>&1 || ! grep -q "protoc-gen-go-vtproto version: $vtproto" proto/tollgate/usage/v1/usage_vtproto.pb.go 2>/dev/null; then
	echo "proto.sh: installing protoc-gen-go-vtproto $vtproto" >&2
	go install "github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$vtproto"
fi

# Pooled messages: their ResetVT keeps the repeated fields' elements, so
# decoding batch after batch into one UsageBatch (the budget consumer's
# DecodeMessageAliased) reuses its events instead of allocating them.
pkg=github.com/tollgate/tollgate/proto/tollgate/usage/v1
pools="pool=$pkg.UsageBatch,pool=$pkg.UsageEvent,pool=$pkg.BudgetCheck"

mapfile -t files < <(cd proto && find . -name '*.proto' -printf '%P\n' | sort)
if [ "${#files[@]}" -eq 0 ]; then
	echo "proto.sh: no .proto files under proto/" >&2
	exit 1
fi

protoc -I proto --go_out=proto --go_opt=paths=source_relative \
	--go-vtproto_out=proto --go-vtproto_opt=paths=source_relative,features=marshal+size+unmarshal+unmarshal_unsafe+pool,$pools "${files[@]}"
echo "proto.sh: generated ${#files[@]} file(s) with $(protoc --version), protoc-gen-go $want, protoc-gen-go-vtproto $vtproto" >&2
