#!/usr/bin/env python3
"""Fails on a source file over 600 lines or a function over 80 lines (issue P20).

Files: app, core, gui, engine, profiler and tests (C++, CUDA, Python). Functions: the C++ and CUDA
ones of app, core, gui, engine and profiler (a test's body or case table reads top to bottom),
measured by Universal Ctags (`universal-ctags`, installed by installer/deps.sh): definition line to
end line.
Allowed over 80 lines: the data tables in TABLES; and, until they are split, the functions in
TO_SPLIT, each no longer than it is listed (the list may only shrink: a function split below 80
lines must leave it). Exits 77 (CTest's skip) when ctags is missing.

Usage: tests/check_sizes.py [SOURCE_ROOT]
"""
import os
import shutil
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
FOLDERS = ("app", "core", "gui", "engine", "profiler", "tests")
FUNCTION_FOLDERS = ("app/", "core/", "gui/", "engine/", "profiler/")
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh", ".py")

# Data tables: one entry per line, nothing to split by responsibility.
TABLES = {("core/graph/op_registry.cpp", "buildTable"), ("profiler/aten_ops.cpp", "buildAtenTable")}

# Functions over the limit today, with their length: they may shrink, not grow (issue P20).
TO_SPLIT = {}


def sources(root):
    for folder in FOLDERS:
        for here, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            for f in files:
                if f.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(here, f), root)


def function_lengths(root, files):
    """(file, name, lines) of every C++/CUDA function definition ctags finds."""
    cpp = [f for f in files if not f.endswith(".py") and f.startswith(FUNCTION_FOLDERS)]
    out = subprocess.run(
        ["ctags", "--languages=C++", "--langmap=C++:+.cu.cuh", "--kinds-C++=f", "--fields=+ne", "-x",
         "--_xformat=%{line} %{end} %N %F", "-L", "-"],
        input="\n".join(cpp), capture_output=True, text=True, cwd=root, check=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
            yield parts[3], parts[2], int(parts[1]) - int(parts[0]) + 1


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    version = subprocess.run(["ctags", "--version"], capture_output=True, text=True) if shutil.which("ctags") else None
    if version is None or "Universal Ctags" not in version.stdout:
        print("check_sizes: skipped, no Universal Ctags (installer/deps.sh installs universal-ctags)")
        return 77
    files = sorted(sources(root))
    problems = []
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as text:
            n = sum(1 for _ in text)
        if n > MAX_FILE_LINES:
            problems.append(f"{f}: {n} lines (at most {MAX_FILE_LINES}): split it by responsibility")
    longest = {}
    for f, name, n in function_lengths(root, files):
        longest[(f, name)] = max(n, longest.get((f, name), 0))
    for (f, name), n in sorted(longest.items()):
        if n <= MAX_FUNCTION_LINES or (f, name) in TABLES:
            continue
        listed = TO_SPLIT.get((f, name))
        if listed is None:
            problems.append(f"{f}: {name} has {n} lines (at most {MAX_FUNCTION_LINES}): split it")
        elif n > listed:
            problems.append(f"{f}: {name} grew to {n} lines (listed at {listed} in tests/check_sizes.py "
                            "until it is split): split it")
    for (f, name), listed in sorted(TO_SPLIT.items()):
        if longest.get((f, name), 0) <= MAX_FUNCTION_LINES:
            problems.append(f"{f}: {name} is {longest.get((f, name), 0)} lines now: take it off TO_SPLIT "
                            "in tests/check_sizes.py")
    for p in problems:
        print(p)
    print(f"check_sizes: {len(files)} files, {len(longest)} functions, {len(TO_SPLIT)} still to split, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
