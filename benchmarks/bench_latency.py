"""Pre-commit latency: a one-file `mpfix check`, as pre-commit runs it, against what it cannot beat.

* a file no rule's trigger occurs in (most commits) vs `python -c pass`: target <= 3x
  (the trigger table answers without importing LibCST: mpfix.trigger_table);
* a file with findings vs `python -c "import libcst"`: target <= 1.5x.

Every run is a fresh process (the console script, as pre-commit calls it), `--no-cache`,
median of --repeat runs, wall clock and CPU time (user + system, which a loaded machine
disturbs less). A script, not a test: timings on a shared machine are noise.

    python benchmarks/bench_latency.py [--repeat 21]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = '''\
"""A module with nothing mixed-precision about it."""

import json
from pathlib import Path


def load(path: Path) -> dict:
    with open(path) as handle:
        return json.load(handle)


def total(items: list[int]) -> int:
    return sum(i * 2 for i in items)
'''

FINDINGS = '''\
import tensorflow as tf


@tf.function(experimental_relax_shapes=True)
def train_step(x):
    return x * 2


tf.config.experimental_run_functions_eagerly(True)
'''


def _median_seconds(command: list[str], cwd: Path, repeat: int, env: dict) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds: user + system of the process and its children)."""
    walls, cpus = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = 0
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    from mpfix import trigger_table

    if trigger_table.load() is None:
        print("warning: mpfix/_trigger_data.py does not match the installed rules, so every run imports LibCST; "
              "regenerate it: python -m mpfix.trigger_table --write", file=sys.stderr)
    script = shutil.which("mpfix", path=os.path.dirname(sys.executable)) or shutil.which("mpfix")
    mpfix = [script] if script else [sys.executable, "-m", "mpfix"]
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # byte-compiled, as an installed mpfix is
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        (project / ".git").mkdir()
        (project / "plain.py").write_text(PLAIN)
        (project / "train.py").write_text(FINDINGS)
        for warm in (mpfix + ["check", "--no-cache", "plain.py"], mpfix + ["check", "--no-cache", "train.py"]):
            subprocess.run(warm, cwd=project, env=env, capture_output=True)  # .pyc files, OS caches
        rows = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("mpfix check plain.py (no trigger)", mpfix + ["check", "--no-cache", "plain.py"]),
            ('python -c "import libcst"', [sys.executable, "-c", "import libcst"]),
            ("mpfix check train.py (2 findings)", mpfix + ["check", "--no-cache", "train.py"]),
        ]
        measured = {name: _median_seconds(command, project, args.repeat, env) for name, command in rows}
    print(f"{'':<40} {'wall':>9} {'CPU':>9}")
    for name, (wall, cpu) in measured.items():
        print(f"{name:<40} {wall * 1000:7.1f} ms {cpu * 1000:6.1f} ms")
    for label, (numerator, denominator), target in (
            ("no-trigger file / python -c pass", (rows[1][0], rows[0][0]), 3.0),
            ("file with findings / import libcst", (rows[3][0], rows[2][0]), 1.5)):
        wall = measured[numerator][0] / measured[denominator][0]
        cpu = measured[numerator][1] / measured[denominator][1]
        print(f"{label:<40} {wall:6.2f}x wall {cpu:6.2f}x CPU  (target <= {target}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
