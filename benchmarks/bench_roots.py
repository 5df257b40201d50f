"""How far the project facts walk: a marker-free folder checked from a crowded working directory,
and a marked project of many files.

    python benchmarks/bench_roots.py [--files 100000] [--keep DIR]

Builds, under a temporary folder with no project marker above it:
- ``crowd/``: ``--files`` small Python files in folders of 500 (each sets ``mixed_float16``, so
  the float16 reach scan has to read it), and ``crowd/tiny/``: 8 sample scripts;
- hostile entries inside the crowd: a symlink loop, a FIFO, a folder nobody may list, a dangling link.

Then it measures, each in a fresh ``python -m mpfix check --no-cache`` (wall seconds, and the
files the project facts list, from ``mpfix.project.files.project_files``):
1. ``check tiny`` from ``crowd/`` (no marker): the project is ``tiny``;
2. ``check tiny/<one file>`` from ``crowd/``: the file's folder, flat;
3. the same after adding ``crowd/pyproject.toml``: the whole marked project is walked (linear in
   its files; reported, not bounded);
4. ``project_files`` of the marked root alone (the walk, in this process).
Ratios, not thresholds: this is a measurement, never a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.py"))[:8]
SETS = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'


def build(base: Path, files: int) -> Path:
    crowd = base / "crowd"
    for n in range(files):
        folder = crowd / f"pkg{n // 500}"
        if n % 500 == 0:
            folder.mkdir(parents=True)
        (folder / f"mod{n % 500}.py").write_text(SETS)
    tiny = crowd / "tiny"
    tiny.mkdir()
    for sample in SAMPLES:
        shutil.copy(sample, tiny / sample.name)
    os.symlink("loop", crowd / "loop")  # a link to itself
    os.symlink(crowd, crowd / "pkg0" / "up")  # a folder link back up the tree
    os.symlink(crowd / "missing.py", crowd / "dangling.py")
    os.mkfifo(crowd / "pipe.py")
    locked = crowd / "locked"
    locked.mkdir()
    (locked / "hidden.py").write_text(SETS)
    locked.chmod(0)  # root still lists it; a user would not
    return crowd


def run(cwd: Path, *args: str) -> tuple[float, int]:
    env = dict(os.environ, NO_COLOR="1")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=3600)
    took = time.perf_counter() - start
    if "Traceback" in done.stderr or done.returncode not in (0, 1):
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"mpfix check {' '.join(args)} failed (exit {done.returncode})")
    return took, done.returncode


def listed(cwd: Path, paths: list[Path], path: Path) -> int:
    """How many files the project facts of ``path`` list, with the run's scope ``paths``."""
    code = ("import os,sys; from pathlib import Path; from mpfix import project; "
            "from mpfix.project.files import project_files; "
            "project.set_scope(project.scope_of([Path(p) for p in sys.argv[2:]])); "
            "print(len(project_files(project.project_root(Path(sys.argv[1])))))")
    done = subprocess.run([sys.executable, "-c", code, str(path), *map(str, paths)], cwd=cwd, capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="build here and keep it (default: a temporary folder)")
    options = parser.parse_args()
    base = options.keep or Path(tempfile.mkdtemp(prefix="bench-roots-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        start = time.perf_counter()
        crowd = build(base, options.files)
        print(f"built {options.files} files in {time.perf_counter() - start:.1f} s under {crowd}")
        one = crowd / "tiny" / SAMPLES[0].name
        rows = []
        took, _ = run(crowd, "tiny")
        rows.append(("check tiny (no marker)", took, listed(crowd, [crowd / "tiny"], one)))
        took, _ = run(crowd, f"tiny/{one.name}")
        rows.append(("check tiny/<file> (no marker)", took, listed(crowd, [one], one)))
        (crowd / "pyproject.toml").write_text("[project]\nname = 'crowd'\n")
        took, _ = run(crowd, "tiny")
        rows.append(("check tiny (marker at crowd/)", took, listed(crowd, [crowd / "tiny"], one)))
        sys.path.insert(0, str(ROOT))
        from mpfix.project.files import project_files

        start = time.perf_counter()
        count = len(project_files(crowd.resolve()))
        rows.append(("project_files(crowd) walk alone", time.perf_counter() - start, count))
        for label, took, count in rows:
            print(f"{label:36s} {took:8.2f} s   project files listed: {count}")
        print(f"marked / unmarked wall: {rows[2][1] / rows[0][1]:.1f}x")
    finally:
        locked = base / "crowd" / "locked"
        if locked.exists():
            locked.chmod(stat.S_IRWXU)
        if options.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
