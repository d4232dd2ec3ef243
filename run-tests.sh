#!/bin/sh
# Runs podsim's whole test suite: the normal build (build/) and the ASan +
# UBSan build (build-san/), `make check` in each, then the libFuzzer targets
# for a fixed number of executions each (build-fuzz/, clang; `make fuzz-ci`,
# doc/robustness.md). Ends with the line "N passed, N failed, N skipped" over
# all. Needs ./setup.sh --no-run to have run once.
#   ./run-tests.sh            all three
#   ./run-tests.sh --quick    the normal build only
set -u
cd "$(dirname "$0")"
[ -x configure ] || autoreconf -fi >/dev/null 2>&1
jobs=$(nproc)
passed=0; failed=0; skipped=0; status=0

run_build () {  # DIR CONFIGURE-FLAGS...
  dir=$1; shift
  mkdir -p "$dir"
  ( cd "$dir" && { [ -f Makefile ] || ../configure -q "$@"; } && make -j"$jobs" >/dev/null ) || {
    echo "run-tests: build in $dir failed" >&2; failed=$((failed + 1)); status=1; return; }
  ( cd "$dir" && make -j"$jobs" check >/dev/null 2>&1 ); rc=$?
  if [ -f "$dir/test-suite.log" ]; then
    p=$(sed -n 's/^# PASS: *//p' "$dir/test-suite.log" | head -1)
    f=$(sed -n 's/^# FAIL: *//p' "$dir/test-suite.log" | head -1)
    e=$(sed -n 's/^# ERROR: *//p' "$dir/test-suite.log" | head -1)
    k=$(sed -n 's/^# SKIP: *//p' "$dir/test-suite.log" | head -1)
    echo "== $dir: ${p:-0} passed, ${f:-0} failed, ${e:-0} errors, ${k:-0} skipped"
    skipped=$((skipped + ${k:-0}))
    for t in $(find "$dir/tests" -name '*.log' 2>/dev/null); do
      trs=${t%.log}.trs
      if [ -f "$trs" ] && grep -qE ':test-result: (FAIL|ERROR)' "$trs"; then
        echo "---- $t"; tail -30 "$t"
      fi
    done
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0} + ${e:-0}))
  else
    echo "run-tests: make check in $dir produced no test-suite.log" >&2; failed=$((failed + 1))
  fi
  [ $rc = 0 ] || status=1
}

# Each fuzz target counts as one test.
run_fuzz () {
  dir=build-fuzz
  if ! command -v clang >/dev/null 2>&1; then
    # Counted from the sources, so the message and the total cannot drift
    # apart again when a target is added (they said 7 and added 4).
    n=$(ls tests/fuzz/fuzz_*.c 2>/dev/null | wc -l)
    echo "== $dir: clang is not installed (./setup.sh installs it): $n fuzz targets skipped"
    skipped=$((skipped + n)); return
  fi
  mkdir -p "$dir"
  ( cd "$dir" && { [ -f Makefile ] || ../configure -q --enable-fuzzing CC=clang CXX=clang++ --disable-werror; } \
      && make -j"$jobs" fuzz-ci >fuzz-ci.out 2>&1 ); rc=$?
  p=$(grep -c '^PASS: fuzz' "$dir/fuzz-ci.out" 2>/dev/null)
  echo "== $dir: ${p:-0} fuzz targets passed"
  grep '^PASS: fuzz' "$dir/fuzz-ci.out" 2>/dev/null | sed 's/^/   /'
  passed=$((passed + ${p:-0}))
  if [ $rc != 0 ]; then
    echo "---- $dir/fuzz-ci.out"; tail -40 "$dir/fuzz-ci.out" 2>/dev/null
    failed=$((failed + 1)); status=1
  fi
}

run_build build
if [ "${1:-}" != "--quick" ]; then
  run_build build-san --enable-sanitizers
  run_fuzz
fi
# Every test's data is in the tree (tests/data/), so a fresh clone skips
# nothing; a skip is a defect to report, not to hide.
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
