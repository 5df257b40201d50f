"""Overhead of ``mpfix verify`` (hooks + bootstrap, no baseline) over the script's own run.

    python benchmarks/verify_overhead.py [SCRIPT] [--steps N] [--repeats R]

Runs SCRIPT --steps N directly, then ``verify(SCRIPT, --no-baseline, steps=N)`` on the
same script and arguments, R times each, alternating, and prints the medians and their
ratio (goal: <= 1.1). verify's child skips interpreter teardown (os._exit), which alone
can save TensorFlow seconds, so the script is also timed with the same shortcut: the
ratio against that run is the honest cost of the bootstrap and the hooks. SCRIPT must accept ``--steps N`` and train exactly N steps. Both
runs are on CPU (CUDA_VISIBLE_DEVICES=-1) so the comparison does not depend on a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCRIPT = ROOT / "tests" / "verify" / "scripts" / "healthy_fit.py"


# Runs the script as __main__, then leaves without teardown, as verify's bootstrap does.
NO_TEARDOWN = (
    "import os, runpy, sys; sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__'); sys.stdout.flush(); os._exit(0)"
)


def time_direct(script: Path, steps: int, teardown: bool = True) -> float:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, str(script)] if teardown else [sys.executable, "-c", NO_TEARDOWN, str(script)]
    start = time.perf_counter()
    subprocess.run(
        [*command, "--steps", str(steps)],
        cwd=script.parent,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def time_verify(script: Path, steps: int) -> float:
    sys.path.insert(0, str(ROOT))
    from mpfix.verify.run import verify

    start = time.perf_counter()
    report = verify(script, ["--steps", str(steps)], steps=steps, baseline=False, device="cpu")
    elapsed = time.perf_counter() - start
    if len(report.mixed.steps) != steps:
        raise SystemExit(f"verify measured {len(report.mixed.steps)} steps, expected {steps}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", nargs="?", type=Path, default=DEFAULT_SCRIPT)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    script = args.script.resolve()
    direct, bare, verified = [], [], []
    for _ in range(args.repeats):
        direct.append(time_direct(script, args.steps))
        bare.append(time_direct(script, args.steps, teardown=False))
        verified.append(time_verify(script, args.steps))
    d, b, v = statistics.median(direct), statistics.median(bare), statistics.median(verified)

    def runs(xs):
        return ", ".join(f"{x:.2f}" for x in xs)

    print(f"script            {script.name}, {args.steps} steps, {args.repeats} runs each")
    print(f"direct            median {d:.2f}s  runs {runs(direct)}")
    print(f"direct, no exit   median {b:.2f}s  runs {runs(bare)}")
    print(f"verify            median {v:.2f}s  runs {runs(verified)}")
    print(f"ratio vs direct           {v / d:.3f}x")
    print(f"ratio vs direct, no exit  {v / b:.3f}x (goal <= 1.1x)")


if __name__ == "__main__":
    main()
