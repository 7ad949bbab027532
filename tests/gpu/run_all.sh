#!/usr/bin/env bash
# The GPU checks in one command (issue P14), for a machine with an NVIDIA GPU, from a bare checkout:
#   tests/gpu/run_all.sh [--bundle] [OUT_DIR]      (default: $OUT, else build/gpu-out)
# --bundle: run the binaries of build/gpu-bundle.tar.xz without trying a build here (saves the
# build's minutes of a short GPU window).
# Prints and records the machine facts (nvidia-smi, glibc, the CUDA toolkit), configures a GUI-less
# build for the local GPU's architecture (sm_90 when nvidia-smi cannot say) and builds the tests
# and the CLI; where the project's dependencies are missing it unpacks build/gpu-bundle.tar.xz
# (tests/gpu/make_bundle.sh) instead. Then runs:
#   1. every GpuSelfTest (the `gpu` label; they skip without a device, here they must pass): saxpy; every
#      CUDA kernel, op by op, against the CPU kernel (forward, in-place updates, input gradients);
#      10 steps of a small CNN (Conv, BatchNorm, pools, HardSwish, Sigmoid gate) against the CPU's
#      losses; one forward and backward of each ONNX corpus model (the bundle's, else made here)
#      against the CPU; the CUDA backend's GPT forward loss and parameter gradients against the CPU backend
#      (dropout off and on); 20 training steps of a 4-layer GPT on cuda:0 against the CPU's losses (1e-4 relative);
#      1F1B on cuda:0x2 (two virtual stage devices), with and without swap/recompute, against one GPU;
#      a CUPTI profile of a 4-layer GPT whose node sum is held against a measured step;
#   2. `pipestudio devices --self-test`: saxpy, then the GELU and AdamW kernels over
#      engine/kernel_math.h against the host's results.
# Writes summary.md and the logs into OUT_DIR, on failure too, and exits non-zero on any failure.
#   3. the benchmark: GPT-2 small (124M, seq 1024, batch 8) in TF32 and bf16 GEMMs by the engine and
#      by PyTorch eager on the same GPU (tests/bench/gpu_vs_torch.py), and the same shape in fp32
#      with a byte vocabulary: tokens/s, ratio and MFU.
set -uo pipefail
cd "$(dirname "$0")/../.."

use_bundle=0
if [ "${1:-}" = "--bundle" ]; then
  use_bundle=1
  shift
fi
out=${1:-${OUT:-build/gpu-out}}
mkdir -p "$out"
summary=$out/summary.md
build=build/gpu
jobs=$(nproc 2>/dev/null || echo 4)
failures=0
start=$SECONDS
# Time limits (seconds) for each test binary and each benchmark run, so that a hang still leaves a
# summary inside a short GPU window.
test_limit=${PS_GPU_TEST_LIMIT:-300}
bench_limit=${PS_GPU_BENCH_LIMIT:-240}

note() { echo "$*" | tee -a "$summary"; }
check() { # check NAME LOG COMMAND...: runs it, records pass/fail with the log's tail
  local name=$1 log=$out/$2
  shift 2
  local t0=$SECONDS
  if "$@" >"$log" 2>&1; then
    note "- PASS $name ($((SECONDS - t0)) s)"
  else
    note "- FAIL $name ($((SECONDS - t0)) s): see $(basename "$log")"
    tail -n 20 "$log" | sed 's/^/    /' >>"$summary"
    failures=$((failures + 1))
  fi
}

: >"$summary"
note "# tests/gpu/run_all.sh on $(hostname) at $(date -u +%Y-%m-%dT%H:%MZ)"
note ""
note "## Machine"
note "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
note "- glibc: $(ldd --version 2>&1 | head -n 1)"
note "- nvcc: $(command -v nvcc >/dev/null && nvcc --version | tail -n 1 || echo 'not on PATH')"
note "- cmake: $(cmake --version 2>&1 | head -n 1); ninja: $(ninja --version 2>&1)"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
arch=${arch:-90}
note "- CUDA architecture built for: sm_$arch"
note ""
note "## Checks"

export PATH=$PATH:/usr/local/cuda/bin
# Where the binaries come from: a build here when CMake finds the project's dependencies, else the
# bundle tests/gpu/make_bundle.sh made on a development machine (build/gpu-bundle.tar.xz, sent
# along with the checkout), whose non-system libraries come with it (GPU.md).
bin=""
libs=""
if [ "$use_bundle" -eq 0 ] && cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPS_BUILD_GUI=OFF \
  -DPS_BUILD_BENCH=OFF -DPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$out/configure.log" 2>&1; then
  note "- PASS configure"
  check "build (engine and profiler tests, pipestudio)" build.log \
    cmake --build "$build" -j "$jobs" --target engine_tests profiler_tests pipestudio
  bin=$build
elif [ -f build/gpu-bundle.tar.xz ]; then
  if [ "$use_bundle" -eq 1 ]; then
    note "- using build/gpu-bundle.tar.xz (--bundle)"
  else
    note "- configure failed here (see configure.log): using build/gpu-bundle.tar.xz"
    grep -E "Could not find|not found" "$out/configure.log" | head -n 5 | sed 's/^/    /' >>"$summary"
  fi
  check "unpack the bundle" unpack.log tar -C build -xJf build/gpu-bundle.tar.xz
  note "    $(cat build/gpu-bundle/BUILT 2>/dev/null)"
  bin=build/gpu-bundle
  libs=$PWD/build/gpu-bundle/lib
else
  note "- FAIL configure: the project's dependencies were not found here and there is no"
  note "  build/gpu-bundle.tar.xz (make one with tests/gpu/make_bundle.sh on a development machine)"
  grep -E "Could not find|not found|Error" "$out/configure.log" | head -n 10 | sed 's/^/    /' >>"$summary"
  failures=$((failures + 1))
fi
# The ONNX corpus for GpuSelfTest.CorpusModelsMatchTheCpuBackend: the bundle's, else one made here
# where Debian's python3-torch is (the test skips without one, and a skip fails this run).
if [ -z "${PS_ONNX_CORPUS:-}" ]; then
  if [ ! -d build/gpu-bundle/corpus ] && [ -f build/gpu-bundle.tar.xz ]; then
    tar -C build -xJf build/gpu-bundle.tar.xz gpu-bundle/corpus 2>/dev/null
  fi
  if [ -f build/gpu-bundle/corpus/manifest.json ]; then
    export PS_ONNX_CORPUS=$PWD/build/gpu-bundle/corpus
  elif /usr/bin/python3 tests/data/make_onnx_corpus.py "$build/onnx-corpus" >"$out/corpus.log" 2>&1 \
    && [ -f "$build/onnx-corpus/manifest.json" ]; then
    export PS_ONNX_CORPUS=$PWD/$build/onnx-corpus
  fi
fi
note "- ONNX corpus: ${PS_ONNX_CORPUS:-none}"
run() { LD_LIBRARY_PATH=${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
find_bin() { # the built or bundled file of a target
  if [ -x "$bin/$1" ]; then echo "$bin/$1"; else find "$bin" -name "$1" -type f -perm -u+x | head -n 1; fi
}

if [ "$failures" -eq 0 ]; then
  for t in engine_tests profiler_tests; do
    exe=$(find_bin "$t")
    check "gpu tests in $t" "$t.log" run timeout "$test_limit" "$exe" --gtest_filter='GpuSelfTest.*' --gtest_color=no
    grep -E "\[ NOTE \]|\[       OK \]|\[  FAILED  \]|\[  SKIPPED \]" "$out/$t.log" | sed 's/^/    /' >>"$summary"
    if grep -q "\[  SKIPPED \]" "$out/$t.log"; then # on a GPU machine a skip is a failure
      note "- FAIL gpu tests in $t skipped here: $(grep -m 1 'no CUDA device' "$out/$t.log")"
      failures=$((failures + 1))
    fi
  done
  cli=$(find_bin pipestudio)
  check "devices --self-test" self-test.log run "$cli" devices --self-test
  if ! grep -q "^Self-test GPU" "$out/self-test.log"; then
    note "- FAIL devices --self-test found no GPU to test: $(grep '^CUDA:' "$out/self-test.log")"
    failures=$((failures + 1))
  else
    grep -E "^Self-test GPU|^  (driver|runtime|cublas|cupti) " "$out/self-test.log" | sed 's/^/    /' >>"$summary"
  fi
fi
# The benchmark: GPT-2 small (124M, vocabulary 50257, seq 1024, batch 8) trained by the engine and
# by PyTorch eager on the same GPU in TF32 and bf16 (tests/bench/gpu_vs_torch.py), tokens/s, ratio
# and MFU; and the same model in fp32 with the byte vocabulary (train_step_vs_torch.py). It runs after
# failed checks too (its numbers are still worth having from a short window), but not without a GPU.
if [ -n "$bin" ] && grep -q "^Self-test GPU" "$out/self-test.log" 2>/dev/null; then
  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    check "benchmark against PyTorch (GPT-2 small, tf32 and bf16)" bench-gpt2.log run timeout $((2 * bench_limit + 20)) python3 \
      tests/bench/gpu_vs_torch.py "$cli" --device cuda:0 --timeout "$bench_limit" --steps "${PS_GPU_BENCH_STEPS:-8}"
    grep -E "^GPT|engine|PyTorch|FAILED" "$out/bench-gpt2.log" | sed 's/^/    /' >>"$summary"
    check "benchmark against PyTorch (fp32)" bench-fp32.log run timeout "$bench_limit" python3 tests/bench/train_step_vs_torch.py \
      "$cli" --device cuda:0 --precision fp32 --peak-tflops 67 --layers 12 --hidden 768 --heads 12 --seq 1024 \
      --batch 8 --steps "${PS_GPU_BENCH_STEPS:-6}" --threads "$jobs" --data README.md
    grep -E "^GPT|engine|PyTorch" "$out/bench-fp32.log" | sed 's/^/    /' >>"$summary"
  else
    note "- benchmark skipped: the python3 here has no PyTorch with CUDA"
  fi
fi
note ""
note "Result: $failures failure(s) in $((SECONDS - start)) s"
[ "$failures" -eq 0 ]
