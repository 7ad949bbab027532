#!/usr/bin/env bash
# The same binary works where no CUDA library can be loaded (issue P14): it needs none at load time
# (cudart is linked statically; cuBLAS, cuDNN, NCCL and CUPTI are opened by name when a GPU is
# used), `devices` explains what is missing, CPU commands run, and asking for a GPU names the reason.
# The toolkit is hidden by a private mount over /usr/local/cuda (unshare -m); PATH keeps only the
# system python (no pip nvidia-* wheels).   usage: without_cuda_libraries.sh PIPESTUDIO WORKDIR
set -uo pipefail
cli=$1
work=$2
mkdir -p "$work"

needed=$(readelf -d "$cli" | grep NEEDED)
if echo "$needed" | grep -Eq "libcuda|libcudart|libcublas|libcudnn|libnccl|libcupti"; then
  echo "FAIL: $cli needs a CUDA library at load time:"
  echo "$needed" | grep -E "libcuda|libcudart|libcublas|libcudnn|libnccl|libcupti"
  exit 1
fi
echo "ok: no CUDA library among the binary's NEEDED entries"

if ! unshare -m true 2>/dev/null; then
  echo "SKIP: unshare -m is not permitted here, so the toolkit cannot be hidden"
  exit 77
fi

# Inside a private mount namespace: /usr/local/cuda is an empty tmpfs.
unshare -m env -i PATH=/usr/bin:/bin HOME="$work" CLI="$cli" WORK="$work" bash -euo pipefail -c '
  if [ -d /usr/local/cuda ]; then mount -t tmpfs none /usr/local/cuda; fi
  cd "$WORK"
  "$CLI" devices > devices.txt
  cat devices.txt
  grep -q "cublas" devices.txt
  if grep -E "cublas.*(/usr/local/cuda|site-packages)" devices.txt; then
    echo "FAIL: a hidden CUDA library was still found"; exit 1
  fi
  rm -f g.pstudio
  "$CLI" new --model gpt2-tiny --output g.pstudio
  "$CLI" plan g.pstudio --stages 2 --device a100-40gb > plan.txt
  "$CLI" train g.pstudio --devices cpu:2 --steps 2 > train.txt
  if "$CLI" train g.pstudio --devices cpu --precision tf32 --steps 1 > tf32.txt 2>&1; then
    echo "FAIL: tf32 training on a CPU device was not refused"; exit 1
  fi
  grep -q "tf32 is a GPU tensor-core mode" tf32.txt
  if "$CLI" train g.pstudio --devices cuda:0 --steps 1 > gpu.txt 2>&1; then
    echo "FAIL: training on cuda:0 succeeded with no CUDA library"; exit 1
  fi
  cat gpu.txt
  grep -Eq "cuda:0: (no NVIDIA driver|this build has no CUDA backend|no usable GPU|libcublas)" gpu.txt
'
status=$?
[ "$status" -eq 0 ] && echo "ok: devices, new, plan and train on CPU devices ran; cuda:0 was refused with its reason"
exit "$status"
