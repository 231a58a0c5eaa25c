#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, only when it
# is missing: nats-server (integration tests), clickhouse-server (analytics
# tests; the tests start their own throwaway server), protoc,
# protoc-gen-go and protoc-gen-go-vtproto (the generated-code staleness
# test), and node and npm (the
# agent framework tests in pkg/conformance, written for Node 20; Debian's own
# nodejs package is the fallback when the machine has none), and chDB,
# current ClickHouse as a library, for the dual-version SQL test
# (dashboards/versions_test.go, build tag chdb). Needs root for apt-get;
# without root it says what is missing and leaves it to you.
set -euo pipefail

need_apt=()
command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if ! command -v clickhouse-server >/dev/null 2>&1 && [ ! -x /usr/sbin/clickhouse-server ] && [ ! -x /usr/bin/clickhouse-server ]; then
  need_apt+=(clickhouse-server clickhouse-client)
fi

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "deps: missing ${need_apt[*]} (install them with your package manager)" >&2
  fi
fi

if ! command -v protoc-gen-go >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/protoc-gen-go" ]; then
  echo "deps: installing protoc-gen-go"
  go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
fi
if ! command -v protoc-gen-go-vtproto >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/protoc-gen-go-vtproto" ]; then
  echo "deps: installing protoc-gen-go-vtproto"
  go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.0
fi

# The npm packages the tests run go into one cache directory, where the
# tests find them: $TOLLGATE_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/tollgate.
cache="${TOLLGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate}"

# chDB: the npm package chdb ships libchdb.so (ClickHouse 26.x, about 540 MB)
# in @chdb/lib-linux-x64-gnu, under $cache/chdb (CHDB_LIB_PATH names
# another library instead).
CHDB_VERSION=3.4.0
chdb_dir="$cache/chdb"
if [ -z "${CHDB_LIB_PATH:-}" ] && { [ ! -f "$chdb_dir/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so" ] ||
  ! grep -q "\"version\": \"$CHDB_VERSION\"" "$chdb_dir/node_modules/chdb/package.json" 2>/dev/null; }; then
  if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] && command -v npm >/dev/null 2>&1; then
    echo "deps: installing chdb $CHDB_VERSION (about 540 MB) into $chdb_dir"
    mkdir -p "$chdb_dir"
    npm install --prefix "$chdb_dir" --no-audit --no-fund --silent --save-exact "chdb@$CHDB_VERSION"
  else
    echo "deps: chdb $CHDB_VERSION needs Linux x86_64 and npm; the dual-version SQL test will skip (fail with CI=true)" >&2
  fi
fi

# Claude Code, pinned, for pkg/conformance's TestClaudeCodeCLI: installed under
# $cache/cli, where the test reads it. npm does not run its
# postinstall here, so its install.cjs (which fetches the native binary) runs
# once after it. Without npm or the registry it says so and goes on; the test
# then skips (fails with CI=true).
claude_code_version=2.1.328
claude_dir="$cache/cli/claude-code-$claude_code_version"
if [ ! -x "$claude_dir/node_modules/.bin/claude" ] && command -v npm >/dev/null 2>&1; then
  echo "deps: installing @anthropic-ai/claude-code@$claude_code_version into $claude_dir"
  mkdir -p "$claude_dir"
  if npm install --silent --no-audit --no-fund --prefix "$claude_dir" "@anthropic-ai/claude-code@$claude_code_version" &&
    (cd "$claude_dir" && node node_modules/@anthropic-ai/claude-code/install.cjs); then
    :
  else
    echo "deps: could not install Claude Code (is the npm registry reachable?)" >&2
  fi
fi
