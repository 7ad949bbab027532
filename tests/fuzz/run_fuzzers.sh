#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for a bounded time (CI: .ci/run) and fails on any
# finding: a crash, sanitizer (ASan/UBSan/LeakSanitizer) report, exception other than ps::Error,
# input slower than -timeout seconds, or RSS above -rss_limit_mb. First replays the committed
# regression inputs (tests/fuzz/regressions/<target>/), then fuzzes from the committed and
# generated seeds. Prints one line per run with libFuzzer's final stats (executions, exec/s).
#   tests/fuzz/run_fuzzers.sh [BUILD_DIR]     (default build/fuzz; PS_FUZZ_SECONDS, default 45)
set -uo pipefail
cd "$(dirname "$0")/../.."

build=${1:-build/fuzz}
seconds=${PS_FUZZ_SECONDS:-45}
bin=$build/tests/fuzz
work=$build/fuzz-run
rm -rf "$work"
mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts" "$work/logs"

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# Generated seeds: this build's own writers, and the small ONNX files of real PyTorch modules.
"$bin/fuzz_seeds" "$work/seeds" resources/catalog/devices.json || exit 1
if [ ! -d "$build/onnx-fixtures-small" ]; then
  /usr/bin/python3 tests/data/make_onnx_fixtures.py "$build/onnx-fixtures-small" --small >/dev/null ||
    echo "fuzz: ONNX fixtures not generated (no torch): hand-built ONNX seeds only"
fi
/usr/bin/python3 tests/fuzz/make_onnx_seeds.py "$work/seeds/onnx_import" "$build/onnx-fixtures-small" || exit 1
cp -r tests/fuzz/corpus/. "$work/seeds/" # committed seeds: Kineto traces, torch 2.x opset-20 exports

failures=0
# run TARGET CORPUS_NAME: the regression inputs once, then fuzzing for $seconds.
run() {
  local target=$1 name=$2 log=$work/logs/$2.log
  local regressions=tests/fuzz/regressions/$target
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    if ! "$bin/$target" -timeout=10 -rss_limit_mb=2048 "$regressions"/* >"$work/logs/$name.regressions.log" 2>&1; then
      echo "fuzz: $target FAILED on a regression input ($regressions)"
      tail -n 40 "$work/logs/$name.regressions.log"
      failures=$((failures + 1))
      return
    fi
  fi
  mkdir -p "$work/corpus/$name" "$work/seeds/$name"
  "$bin/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$name-" "$work/corpus/$name" "$work/seeds/$name" >"$log" 2>&1
  local rc=$?
  local execs rate
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  printf 'fuzz: %-18s %-14s %10s execs %7s exec/s  corpus %s  rc %s\n' "$target" "$name" "${execs:-?}" \
    "${rate:-?}" "$(ls "$work/corpus/$name" | wc -l)" "$rc"
  if [ $rc -ne 0 ]; then
    echo "fuzz: $target FINDING (artifacts: $work/artifacts/$name-*)"
    grep -m1 -E "ERROR: |runtime error|==ERROR|deadly signal|timeout|out-of-memory" "$log" || true
    tail -n 60 "$log"
    failures=$((failures + 1))
  fi
}

run fuzz_onnx_import onnx_import
run fuzz_project_open project
run fuzz_schedule_csv schedule_csv
run fuzz_cluster_json cluster_json
run fuzz_trace_import trace_json
run fuzz_trace_import trace_nsys

if [ $failures -ne 0 ]; then
  echo "fuzz: $failures run(s) with findings"
  exit 1
fi
echo "fuzz: no findings"
