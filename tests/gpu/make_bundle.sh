#!/usr/bin/env bash
# Builds, on a development machine, what tests/gpu/run_all.sh runs where the GPU machine lacks the
# project's dependencies (GPU.md): GUI-less engine_tests, profiler_tests and pipestudio for sm_90
# (or the architectures given), stripped, with the non-system shared libraries they load (CUDA's
# excluded: they are on the GPU machine and too large to send), and the opset-17 models of the ONNX
# corpus under 2.5 MB each with the manifest (GpuSelfTest.CorpusModelsMatchTheCpuBackend; the corpus
# is build/ci/onnx-corpus when a ci build made it, else made here by Debian's python3-torch), as
# build/gpu-bundle.tar.xz.
#   tests/gpu/make_bundle.sh [CUDA_ARCHITECTURES]      (default 90)
# Send it with the checkout (the device tool's carry: build/gpu-bundle.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/../.."
arch=${1:-90}
build=build/gpu-bundle-build
stage=build/gpu-bundle
export PATH=$PATH:/usr/local/cuda/bin
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPS_BUILD_GUI=OFF -DPS_BUILD_BENCH=OFF \
  -DPS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$build" -j "$(nproc)" --target engine_tests profiler_tests pipestudio
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
for exe in "$build/tests/engine/engine_tests" "$build/tests/profiler/profiler_tests" "$build/app/pipestudio"; do
  cp "$exe" "$stage/bin/"
  strip "$stage/bin/$(basename "$exe")"
done
# The libraries every Linux has (the C and C++ runtimes, the loader, zlib) stay; CUDA's stay.
system='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^ ]*|libz)\.so'
cuda='^lib(cuda|cudart|cublas|cublasLt|cudnn[^ ]*|nccl|cupti|nvrtc|nvJitLink)\.so'
for exe in "$stage"/bin/*; do
  ldd "$exe" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ $name =~ $system || $name =~ $cuda ]]; then continue; fi
  cp -L "$path" "$stage/lib/$name"
done
strip --strip-unneeded "$stage"/lib/* 2>/dev/null || true
corpus=build/ci/onnx-corpus
if [ ! -f "$corpus/manifest.json" ]; then
  corpus=build/gpu-bundle-corpus
  /usr/bin/python3 tests/data/make_onnx_corpus.py "$corpus" >/dev/null
fi
if [ -f "$corpus/manifest.json" ]; then
  mkdir -p "$stage/corpus"
  cp "$corpus/manifest.json" "$stage/corpus/"
  find "$corpus" -maxdepth 1 -name '*-op17.onnx' -size -2560k -exec cp {} "$stage/corpus/" \;
  echo "corpus: $(find "$stage/corpus" -name '*.onnx' | wc -l) models"
else
  echo "no ONNX corpus (Debian's python3-torch is missing): the bundle goes without it" >&2
fi
echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD) for sm_$arch on $(. /etc/os-release && echo "$PRETTY_NAME")" \
  >"$stage/BUILT"
tar -C build -cJf build/gpu-bundle.tar.xz gpu-bundle
ls -l build/gpu-bundle.tar.xz
cat "$stage/BUILT"
ls "$stage/lib"
