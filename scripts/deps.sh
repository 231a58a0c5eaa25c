#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, only when it
# is missing: nats-server (integration tests), clickhouse-server (analytics
# tests; the tests start their own throwaway server), zookeeper and a Java
# runtime (the replicated ClickHouse cluster test), protoc,
# protoc-gen-go and protoc-gen-go-vtproto (the generated-code staleness
# test), and node and npm (the
# agent framework tests in pkg/conformance, written for Node 20; Debian's own
# nodejs package is the fallback when the machine has none), chDB (current
# ClickHouse as a library, for the dual-version SQL test, build tag chdb)
# the Claude Code, Codex and Gemini CLIs (pkg/conformance), and Debian's
# chromium with npm's axe-core (the console's browser tests in
# services/gateway). Needs root for
# apt-get. A dependency that is missing and cannot be installed ends the run
# with a non-zero status and a message naming it.
set -euo pipefail

need_apt=()
command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
# ZooKeeper (and a Java runtime) for the replicated ClickHouse cluster test
# (make test-cluster).
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need_apt+=(zookeeper)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if ! command -v clickhouse-server >/dev/null 2>&1 && [ ! -x /usr/sbin/clickhouse-server ] && [ ! -x /usr/bin/clickhouse-server ]; then
  need_apt+=(clickhouse-server clickhouse-client)
fi

missing=()

# fail_missing names every dependency still missing and ends the run: a
# test that needs one would otherwise skip (or fail later, further from
# the cause).
fail_missing() {
  echo "deps: cannot install ${missing[*]}: $1" >&2
  exit 1
}

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    missing=("${need_apt[@]}")
    fail_missing "install them with your package manager (apt-get needs root), then run again"
  fi
  echo "deps: installing ${need_apt[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null; }; then
    missing=("${need_apt[@]}")
    fail_missing "apt-get failed"
  fi
fi

# go_tool installs a Go program unless it is on PATH or in GOPATH/bin.
go_tool() {
  local name=$1 module=$2
  if command -v "$name" >/dev/null 2>&1 || [ -x "$(go env GOPATH)/bin/$name" ]; then
    return
  fi
  echo "deps: installing $name"
  if ! go install "$module"; then
    missing=("$name")
    fail_missing "go install $module failed (is the Go module proxy reachable?)"
  fi
}
go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go_tool protoc-gen-go-vtproto github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.0

# golangci-lint, at the version .golangci.yml is written for (make lint),
# unless that version is on PATH or in GOPATH/bin already.
lint_version=2.15.0
lint_bin="$(go env GOPATH)/bin/golangci-lint"
if ! { golangci-lint version 2>/dev/null || "$lint_bin" version 2>/dev/null; } | grep -q "version $lint_version "; then
  echo "deps: installing golangci-lint $lint_version"
  if ! go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$lint_version"; then
    missing=(golangci-lint)
    fail_missing "go install golangci-lint failed (is the Go module proxy reachable?)"
  fi
fi

# npm_pkg installs npm packages into dir unless check (a file) exists there.
npm_pkg() {
  local dir=$1 check=$2
  shift 2
  [ -e "$dir/$check" ] && return
  echo "deps: installing $* into $dir"
  mkdir -p "$dir"
  if ! npm install --prefix "$dir" --no-audit --no-fund --silent --save-exact "$@"; then
    missing=("$@")
    fail_missing "npm install failed (is the npm registry reachable?)"
  fi
}

# The npm packages the tests run go into one cache directory, where the
# tests find them: $TOLLGATE_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/tollgate.
cache="${TOLLGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate}"

# chDB: the npm package chdb ships libchdb.so (ClickHouse 26.x, about 540 MB)
# in @chdb/lib-linux-x64-gnu, under $cache/chdb-VERSION (CHDB_LIB_PATH names
# another library instead). It is built for Linux x86_64 only; elsewhere the
# dual-version SQL test skips (and fails with CI=true).
chdb_version=3.4.0
if [ -z "${CHDB_LIB_PATH:-}" ]; then
  if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
    npm_pkg "$cache/chdb-$chdb_version" node_modules/@chdb/lib-linux-x64-gnu/libchdb.so "chdb@$chdb_version"
  else
    echo "deps: chdb $chdb_version needs Linux x86_64; the dual-version SQL test will skip (fail with CI=true)" >&2
  fi
fi

# Claude Code, pinned, for pkg/conformance's TestClaudeCodeCLI, under
# $cache/cli. npm does not run its postinstall here, so its install.cjs
# (which puts the native binary of the platform's npm package in place)
# runs once after it.
claude_code_version=2.1.328
claude_dir="$cache/cli/claude-code-$claude_code_version"
if [ ! -x "$claude_dir/node_modules/.bin/claude" ]; then
  npm_pkg "$claude_dir" node_modules/@anthropic-ai/claude-code/install.cjs "@anthropic-ai/claude-code@$claude_code_version"
  if ! (cd "$claude_dir" && node node_modules/@anthropic-ai/claude-code/install.cjs); then
    missing=("@anthropic-ai/claude-code@$claude_code_version")
    fail_missing "its install.cjs failed"
  fi
fi

# Gemini CLI, pinned, for pkg/conformance's TestGeminiCLI, under $cache/cli.
gemini_cli_version=0.61.0
npm_pkg "$cache/cli/gemini-cli-$gemini_cli_version" node_modules/.bin/gemini "@google/gemini-cli@$gemini_cli_version"

# Codex CLI, pinned, for pkg/conformance's TestCodexCLI, under $cache/cli.
# The npm package's launcher runs the native binary of the platform's
# optional dependency (@openai/codex-linux-x64 and the like), which npm
# installs with it; the run checks that it starts.
codex_version=0.169.0
codex_dir="$cache/cli/codex-$codex_version"
if [ ! -x "$codex_dir/node_modules/.bin/codex" ]; then
  npm_pkg "$codex_dir" node_modules/@openai/codex/package.json "@openai/codex@$codex_version"
fi
if ! "$codex_dir/node_modules/.bin/codex" --version >/dev/null 2>&1; then
  missing=("@openai/codex@$codex_version")
  fail_missing "its native binary does not run (was its platform package installed?)"
fi

# axe-core, pinned, for the console's browser tests (services/gateway): they
# inject its axe.min.js into every page, under $cache/axe-core-VERSION.
axe_core_version=4.14.1
npm_pkg "$cache/axe-core-$axe_core_version" node_modules/axe-core/axe.min.js "axe-core@$axe_core_version"

# The browser tests drive Debian's chromium headless; check that it starts.
if ! chromium --headless --no-sandbox --disable-gpu --dump-dom about:blank >/dev/null 2>&1; then
  missing=(chromium)
  fail_missing "it is installed but does not start headless (chromium --headless --no-sandbox)"
fi
