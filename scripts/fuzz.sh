#!/usr/bin/env bash
# Runs every Go fuzz target of the module, one at a time, for FUZZTIME each
# (default 3s): `scripts/fuzz.sh [DIR...]` (default: every package). Targets
# are found by name (func FuzzX in *_test.go), so new ones run without
# being listed here. The committed corpus under each package's
# testdata/fuzz/FuzzX/ is replayed first; a failing input found while
# fuzzing is written there by Go (testdata/fuzz/FuzzX/<hash>) and makes this
# script fail: commit it with the fix, and it becomes a regression test
# that plain `go test` runs. No -race: the fuzzer needs the speed. Each
# package's instrumented test binary is built once for all its targets.
#
# FUZZ_BUDGET (seconds, default 0 = none) bounds the whole run: once it is
# spent, the remaining targets are listed as not fuzzed this run (their
# committed corpora still ran as plain tests in `go test`). `make test` sets
# it so that a cold build cache on a small machine cannot stretch CI.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-3s}
FUZZ_BUDGET=${FUZZ_BUDGET:-0}
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  dirs=(.)
fi

targets=$(grep -rHoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' "${dirs[@]}" \
  | grep -v '/vendor/' | sed -E 's#^\./##; s#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\($#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
  echo "fuzz: no targets found"; exit 1
fi

failed=()
skipped=()
n=0
start=$SECONDS
work=$(mktemp -d)
out="$work/out"
trap 'rm -rf "$work"' EXIT
cache="$(go env GOCACHE)/fuzz/$(go list -m)"
# The binary runs in the package directory, as go test runs it, so the
# corpus and new failing inputs are under its testdata/fuzz/.
built=""
# fuzz DIR NAME runs one target; its output goes to $out.
fuzz() {
  (cd "$1" && "$work/$(echo "$1" | tr / _).test" -test.run '^$' -test.fuzz "^${2}\$" \
    -test.fuzztime "$FUZZTIME" -test.fuzzcachedir "$cache/$1") >"$out" 2>&1
}
while read -r dir name; do
  if [ "$FUZZ_BUDGET" -gt 0 ] && [ $((SECONDS - start)) -ge "$FUZZ_BUDGET" ]; then
    skipped+=("./$dir $name")
    continue
  fi
  n=$((n + 1))
  if [ "$built" != "$dir" ]; then
    built=$dir
    if ! go test -c -o "$work/$(echo "$dir" | tr / _).test" -fuzz "^${name}\$" "./$dir" >"$out" 2>&1; then
      cat "$out"
      failed+=("./$dir (build)")
      continue
    fi
  fi
  echo "== fuzz ./$dir $name ($FUZZTIME)"
  if fuzz "$dir" "$name"; then
    grep "elapsed" "$out" | tail -n 1
    continue
  fi
  # On a loaded machine Go's fuzz coordinator can stop on its own deadline
  # while a worker is still busy, without any failing input: run once more.
  if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
    echo "fuzz: $name stopped at the engine's deadline without a failing input; running it again"
    if fuzz "$dir" "$name"; then
      grep "elapsed" "$out" | tail -n 1
      continue
    fi
    if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
      # Twice out of time with no failing input: the machine is too busy to
      # fuzz this target now, which says nothing about the code.
      echo "fuzz: WARNING: $name ran out of time twice without a failing input; not counted as a failure"
      continue
    fi
  fi
  cat "$out"
  failed+=("./$dir $name")
done <<<"$targets"

echo "fuzz: $n targets in $((SECONDS - start))s"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "fuzz: FUZZ_BUDGET (${FUZZ_BUDGET}s) spent; not fuzzed this run (their corpora ran in go test):"
  printf '  %s\n' "${skipped[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED (failing inputs are under the package's testdata/fuzz/):"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
