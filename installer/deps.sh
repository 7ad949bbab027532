#!/usr/bin/env bash
# Installs the Debian 12 packages PipeStudio builds and tests with. Idempotent: does nothing
# when everything is present. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git
  libsqlite3-dev nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  qt6-base-dev libgl-dev libqcustomplot-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  clang-format universal-ctags # formatting and size checks (tests/check_sizes.py)
  file dpkg-dev # cpack's .deb: dpkg-shlibdeps on the files `file` reports as ELF
)
# Test-only packages (quickstart.sh run sets PS_SKIP_TORCH=1 and skips them).
if [ "${PS_SKIP_TORCH:-0}" != "1" ]; then
  # Tests export real PyTorch modules to ONNX with Debian's torch (/usr/bin/python3).
  packages+=(python3-torch python3-onnx python3-torchvision)
  # A venv for the test-only PyPI packages (installer/test_venv.sh: onnxruntime).
  packages+=(python3-venv)
  # Validators for the packaging checks (tests/packaging, installer/check_package.sh).
  packages+=(desktop-file-utils appstream shared-mime-info)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
