#!/usr/bin/env bash
# Test-only Python packages that Debian 12 does not package, from PyPI into a venv of their own
# (build/venv-ort; Debian's python3 keeps its torch 1.13 for the fixtures): onnxruntime, the
# independent oracle the ONNX corpus's forward passes are compared with
# (tests/data/ort_reference.py). Idempotent. Best effort: offline, it says so and the comparison
# skips saying why; nothing else depends on it.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${PS_ORT_VENV:-build/venv-ort}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import onnxruntime" 2>/dev/null; then
  echo "test venv: onnxruntime present in $venv"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
if ! python3 -m venv "$venv" >/dev/null 2>&1; then
  echo "test venv: python3 -m venv failed (python3-venv missing?): the onnxruntime comparison will skip"
  exit 0
fi
if "$venv/bin/pip" install --quiet --disable-pip-version-check "onnxruntime>=1.17,<1.33" numpy; then
  echo "test venv: $("$venv/bin/python" -c 'import onnxruntime; print("onnxruntime", onnxruntime.__version__)') in $venv"
else
  echo "test venv: pip could not install onnxruntime (offline?): the onnxruntime comparison will skip"
fi
exit 0
