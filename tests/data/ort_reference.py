#!/usr/bin/env python3
"""onnxruntime as an independent oracle for the ONNX corpus (issue P15.5): runs every export that
tests/data/make_onnx_corpus.py wrote into CORPUS_DIR through onnxruntime's CPU provider, on the same
inputs (<stem>.in.bin), and writes <stem>.ort.bin (its first output, float32) and ort.json
({"onnxruntime": version, "results": {stem: "ok" | "error: ..."}}), which
tests/engine/onnx_corpus_test.cpp compares the engine's forward with.

    python3 tests/data/ort_reference.py CORPUS_DIR [--python PYTHON]

Debian 12 packages no onnxruntime: installer/test_venv.sh puts it (from PyPI) into a venv, whose
python --python names; this script re-runs itself there when its own python lacks onnxruntime.
Without onnxruntime anywhere it writes ort.json as {"skipped": why} and exits 0, so the tests say
why they skipped.
"""
import json
import os
import sys


def write(out_dir, payload):
    with open(os.path.join(out_dir, "ort.json"), "w") as f:
        json.dump(payload, f, indent=2)


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    out_dir = args[0]
    python = args[args.index("--python") + 1] if "--python" in args else ""
    if not os.path.exists(os.path.join(out_dir, "manifest.json")):
        print(f"ort reference: no corpus in {out_dir}")
        return 0
    for name in os.listdir(out_dir):  # an earlier run's outputs are not this run's
        if name.endswith(".ort.bin") or name == "ort.json":
            os.remove(os.path.join(out_dir, name))
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        if python and os.path.exists(python) and os.path.realpath(python) != os.path.realpath(sys.executable):
            os.execv(python, [python, os.path.abspath(__file__), out_dir])
        why = f"onnxruntime is not installed ({e}); installer/test_venv.sh installs it from PyPI into build/venv-ort"
        print(f"ort reference: skipped: {why}")
        write(out_dir, {"skipped": why})
        return 0
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    results = {}
    for e in manifest:
        if "error" in e:
            continue
        stem = os.path.join(out_dir, e["file"][: -len(".onnx")])
        name = os.path.basename(stem)
        try:
            session = ort.InferenceSession(stem + ".onnx", options, providers=["CPUExecutionProvider"])
            raw = open(stem + ".in.bin", "rb").read()
            feeds, at = {}, 0
            for i in e["inputs"]:
                dtype = np.int64 if i["dtype"] == "int64" else np.float32
                count = int(np.prod(i["shape"])) if i["shape"] else 1
                size = count * np.dtype(dtype).itemsize
                feeds[i["name"]] = np.frombuffer(raw[at : at + size], dtype=dtype).reshape(i["shape"])
                at += size
            wanted = {x.name for x in session.get_inputs()}
            out = session.run(None, {k: v for k, v in feeds.items() if k in wanted})[0]
            with open(stem + ".ort.bin", "wb") as f:
                f.write(np.asarray(out, dtype=np.float32).tobytes())
            results[name] = "ok"
        except Exception as ex:  # recorded: onnxruntime's own limits are findings too
            first = str(ex).strip().splitlines()[0] if str(ex).strip() else ""
            results[name] = f"error: {type(ex).__name__}: {first}"[:300]
            print(f"{name}: onnxruntime failed: {results[name]}")
    write(out_dir, {"onnxruntime": ort.__version__, "results": results})
    ok = sum(1 for r in results.values() if r == "ok")
    print(f"ort reference: onnxruntime {ort.__version__} ran {ok} of {len(results)} exports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
