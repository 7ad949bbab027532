#!/usr/bin/env bash
# The README's two commands.
#   installer/quickstart.sh run   install what is missing, build, start PipeStudio: the GUI when a
#                                 display exists, otherwise the headless end-to-end demo
#   installer/quickstart.sh test  install what is missing, build, run the whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-run}
jobs=$(nproc 2>/dev/null || echo 2)
if [ "$mode" = "run" ]; then
  PS_SKIP_TORCH=1 installer/deps.sh # torch only generates test fixtures
else
  installer/deps.sh
  installer/test_venv.sh # onnxruntime from PyPI, the ONNX corpus's second oracle (best effort)
fi

case "$mode" in
  run)
    cmake --preset release >/dev/null
    cmake --build --preset release -j "$jobs"
    shift || true
    exec build/release/app/pipestudio "$@"
    ;;
  test)
    cmake --preset ci
    cmake --build --preset ci -j "$jobs"
    ctest --preset ci -j "$jobs"
    ;;
  *)
    echo "usage: $0 run|test" >&2
    exit 2
    ;;
esac
