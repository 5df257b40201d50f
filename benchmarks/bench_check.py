#!/usr/bin/env python
"""How fast is ``mpfix check`` on real code, next to just parsing it?

Corpora (any machine can get them from the registry):
  * the ``tf-models-official`` wheel's sources (``pip download --no-deps``);
  * the installed ``keras`` package's sources (located without importing it).

Each is copied into ``.bench/corpus/<name>/`` with its own ``pyproject.toml``, one project each, as in
a real repository. Every measurement is a fresh child process (so start-up and
imports count, as users feel them), repeated ``--repeat`` times; the table
shows medians and ratios:

  ast.parse all        stdlib ``ast.parse`` of every file, 1 process
  libcst parse all     ``libcst.parse_module`` of every file, 1 process (the baseline)
  mpfix check cold     empty cache (``MPFIX_CACHE_DIR`` → fresh folder), default --jobs
  mpfix policy cold    the same with ``--policy mixed_float16`` (every float16 rule runs wherever
                       it is triggered; issue 18: at most 1.5× the default run)
  mpfix check warm     the same again: the cache holds every clean file
  one file             ``mpfix check --no-cache FILE`` vs ``python -c "import libcst"``; and
                       ``mpfix check FILE`` with a warm cache, FILE just edited (pre-commit's case) or not

Peak memory is ``ru_maxrss`` of the largest process of each command (workers included).
CPU is user + system time of the command and every process it waited for (workers included):
on a shared machine the wall-clock ratios move with the load of others, CPU ratios far less.
The load average is printed before and after the run.

Usage: python benchmarks/bench_check.py [--repeat 3] [--jobs N] [--corpus tfm,keras] [--one-file]
(``--one-file``: only the one-file rows, of the first corpus.)
(``MPFIX_GATE=0`` in the environment: every mpfix row without the gate before the parse, ``mpfix.gate``,
for an A/B at one commit; ``MPFIX_EARLY=0``: without the facts-free files the project pass's helpers check
while it runs, ``mpfix.early``.)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / ".bench"
TFM_VERSION = "2.20.0"
ENV_CACHE = "MPFIX_CACHE_DIR"

# Run in a child: time one command and report the peak RSS of its processes.
_MEASURE = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
peak = usage.ru_maxrss  # KiB on Linux
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_kib": peak, "rc": proc.returncode,
                  "stderr": proc.stderr.decode()[-2000:]}))
"""

_PARSE_ALL = r"""
import sys
from pathlib import Path
kind, folder = sys.argv[1], Path(sys.argv[2])
if kind == "ast":
    import ast
    parse = lambda text: ast.parse(text)
else:
    import libcst
    parse = libcst.parse_module
failed = 0
for path in sorted(folder.rglob("*.py")):
    try:
        parse(path.read_text(encoding="utf-8"))
    except Exception:
        failed += 1
print(failed, file=sys.stderr)
"""


def _corpus_tfm(dest: Path) -> Path:
    target = dest / "tfm"
    if target.is_dir():
        return target
    wheels = BENCH / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob(f"tf_models_official-{TFM_VERSION}-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        f"tf-models-official=={TFM_VERSION}", "-d", str(wheels)], check=True)
    wheel = next(wheels.glob(f"tf_models_official-{TFM_VERSION}-*.whl"))
    tmp = Path(tempfile.mkdtemp(dir=dest))
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".py"):
                archive.extract(name, tmp)
    tmp.rename(target)
    return target


def _corpus_keras(dest: Path) -> Path:
    target = dest / "keras"
    if target.is_dir():
        return target
    spec = importlib.util.find_spec("keras")  # finds the package without importing TensorFlow
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("keras is not installed")
    source = Path(list(spec.submodule_search_locations)[0])
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return target


def prepare(names: list[str]) -> dict[str, Path]:
    dest = BENCH / "corpus"
    dest.mkdir(parents=True, exist_ok=True)
    # Each corpus is its own project, as its repository is: one pyproject.toml above both made tf-models
    # and Keras one project, so every tfm run paid project facts (cross-file scan, callers index) for
    # Keras's ~900 files too (turn 12: 34.5 s -> 26.6 s user CPU, the same 40 findings).
    (dest / "pyproject.toml").unlink(missing_ok=True)
    makers = {"tfm": _corpus_tfm, "keras": _corpus_keras}
    corpora = {name: makers[name](dest) for name in names}
    for name, folder in corpora.items():
        (folder / "pyproject.toml").write_text(f"[project]\nname = 'bench-{name}'\n")
    return corpora


def measure(argv: list[str], env: dict | None = None) -> dict:
    import json

    out = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True,
                         env=env, check=True)
    result = json.loads(out.stdout)
    if result["rc"] not in (0, 1):  # 1: findings
        raise SystemExit(f"{' '.join(argv)} failed (exit {result['rc']}):\n{result['stderr']}")
    return result


class Timing(float):
    """A median wall time (the float), with the median CPU time of the same runs as ``cpu``."""

    cpu: float


def repeat(times: int, argv: list[str], env: dict | None = None, before=None) -> tuple[Timing, float]:
    walls, cpus, peaks = [], [], []
    for _ in range(times):
        if before is not None:
            before()
        r = measure(argv, env)
        walls.append(r["wall"])
        cpus.append(r["cpu"])
        peaks.append(r["peak_kib"])
    timing = Timing(statistics.median(walls))
    timing.cpu = statistics.median(cpus)
    return timing, max(peaks) / 1024


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def corpus_size(folder: Path) -> tuple[int, int]:
    files = sorted(folder.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    return len(files), lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slow-repeat", type=int, default=None,
                        help="runs of the slow rows (libcst parse all, mpfix cold); default: --repeat")
    parser.add_argument("--jobs", type=int, default=None, help="mpfix --jobs (default: mpfix's own default)")
    parser.add_argument("--corpus", default="tfm,keras")
    parser.add_argument("--one-file", action="store_true",
                        help="only the one-file rows (the first corpus; ~1 min instead of ~4 on tf-models)")
    args = parser.parse_args()

    corpora = prepare(args.corpus.split(","))
    mpfix = [sys.executable, "-m", "mpfix", "check", "-q", "--exit-zero"]
    if args.jobs:
        mpfix += ["--jobs", str(args.jobs)]
    cache_dir = Path(tempfile.mkdtemp(prefix="mpfix-bench-cache-"))
    # Byte-compiled, as an installed package is: any value of PYTHONDONTWRITEBYTECODE (even "0")
    # stops Python writing .pyc files, and mpfix's own modules would be compiled on every run.
    import compileall

    for package in ("mpfix", "codemods"):  # folders of the checkout
        compileall.compile_dir(str(ROOT / package), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env[ENV_CACHE] = str(cache_dir)

    def clear_cache() -> None:
        shutil.rmtree(cache_dir, ignore_errors=True)

    load_before = load_average()
    rows = []
    for name, folder in corpora.items() if not args.one_file else ():
        files, lines = corpus_size(folder)
        print(f"[{name}] {files} files, {lines} lines: measuring ...", file=sys.stderr, flush=True)
        ast_t, ast_m = repeat(args.repeat, [sys.executable, "-c", _PARSE_ALL, "ast", str(folder)])
        slow = args.slow_repeat or args.repeat
        cst_t, cst_m = repeat(slow, [sys.executable, "-c", _PARSE_ALL, "cst", str(folder)])
        policy_t, _ = repeat(slow, [*mpfix, "--policy", "mixed_float16", str(folder)], env, before=clear_cache)
        cold_t, cold_m = repeat(slow, [*mpfix, str(folder)], env, before=clear_cache)
        repeat(1, [*mpfix, str(folder)], env)  # make sure the cache is full
        warm_t, warm_m = repeat(args.repeat, [*mpfix, str(folder)], env)
        rows.append((name, files, lines, ast_t, cst_t, cold_t, warm_t, ast_m, cst_m, cold_m, warm_m, policy_t))

    # One-file latency: a real file that passes the prefilter (it holds a tf.function).
    folder = next(iter(corpora.values()))
    sample = next((p for p in sorted(folder.rglob("*.py")) if b"@tf.function" in p.read_bytes()),
                  next(iter(sorted(folder.rglob("*.py")))))
    times = max(args.repeat, 5)
    pass_t, _ = repeat(times, [sys.executable, "-c", "pass"])
    import_t, import_m = repeat(times, [sys.executable, "-c", "import libcst"])
    one_t, one_m = repeat(times, [*mpfix, "--no-cache", str(sample)], env)
    # The pre-commit case: the cache is warm, then one file is edited and checked. The project's stored facts
    # rest on every file's size and mtime (mpfix.project.store), so an edit makes mpfix join them again, from the
    # per-file records of the files not edited (mpfix.project.file_records) and the edited file read again.
    original = sample.read_bytes()
    edits = iter(range(1, 1000))
    repeat(1, [*mpfix, str(folder)], env)  # the whole project checked once: a warm cache

    def edit() -> None:
        sample.write_bytes(original + f"\n# edit {next(edits)}\n".encode())
    try:
        edited_t, _ = repeat(times, [*mpfix, str(sample)], env, before=edit)
        same_t, _ = repeat(times, [*mpfix, str(sample)], env)  # the last edit, checked again
    finally:
        sample.write_bytes(original)

    print()
    print(f"mpfix check benchmark — {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"median of {args.repeat} runs ({args.slow_repeat or args.repeat} for libcst parse all and cold), "
          f"jobs={args.jobs or 'default'}; load average (1/5/15 min) {load_before} before, {load_average()} after")
    print()
    if rows:
        print("| corpus | files | lines | ast.parse all | libcst parse all | mpfix cold | mpfix warm "
              "| cold / libcst | warm / libcst | cold / ast | peak RSS MiB (ast / libcst / cold / warm) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for name, files, lines, ast_t, cst_t, cold_t, warm_t, ast_m, cst_m, cold_m, warm_m, _ in rows:
            print(f"| {name} | {files} | {lines} | {ast_t:.2f} s | {cst_t:.2f} s | {cold_t:.2f} s | {warm_t:.2f} s "
                  f"| {cold_t / cst_t:.3f}× | {warm_t / cst_t:.3f}× | {cold_t / ast_t:.2f}× "
                  f"| {ast_m:.0f} / {cst_m:.0f} / {cold_m:.0f} / {warm_m:.0f} |")
        print()
        print("| corpus | policy cold (wall) | policy / default (wall) | CPU: libcst parse all | CPU: cold | CPU: policy cold "
              "| CPU: cold / libcst | CPU: policy / default |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, *_, cst_t, cold_t, warm_t, ast_m, cst_m, cold_m, warm_m, policy_t in rows:
            print(f"| {name} | {policy_t:.2f} s | {policy_t / cold_t:.2f}× | {cst_t.cpu:.2f} s | {cold_t.cpu:.2f} s "
                  f"| {policy_t.cpu:.2f} s | {cold_t.cpu / cst_t.cpu:.3f}× | {policy_t.cpu / cold_t.cpu:.2f}× |")
        print()
    print(f"| one file ({sample.relative_to(folder.parent)}) | wall | vs `import libcst` |")
    print("|---|---:|---:|")
    print(f"| `python -c pass` | {pass_t:.3f} s | {pass_t / import_t:.2f}× |")
    print(f"| `python -c \"import libcst\"` | {import_t:.3f} s | 1.00× |")
    print(f"| `mpfix check --no-cache FILE` | {one_t:.3f} s | {one_t / import_t:.2f}× (peak {one_m:.0f} MiB) |")
    print(f"| `mpfix check FILE`, warm cache, FILE just edited | {edited_t:.3f} s | {edited_t / import_t:.2f}× "
          f"(CPU {edited_t.cpu:.2f} s) |")
    print(f"| `mpfix check FILE`, warm cache, nothing edited | {same_t:.3f} s | {same_t / import_t:.2f}× "
          f"(CPU {same_t.cpu:.2f} s) |")
    print()
    print("Targets: cold ≤ 0.25× libcst parse all (issue 18, tf-models); policy cold ≤ 1.5× cold; "
          "warm ≤ 0.05×; one file ≤ 2× import libcst.")
    shutil.rmtree(cache_dir, ignore_errors=True)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"(benchmark took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
