"""Overhead of ``mpfix verify`` (hooks + bootstrap, no baseline) over the script's own run.

    python benchmarks/verify_overhead.py [SCRIPT] [--steps N] [--repeats R] [--compare ROOT]

Runs SCRIPT --steps N directly, then ``verify(SCRIPT, --no-baseline, steps=N)`` on the
same script and arguments, R times each, interleaved, and prints the medians and their
ratio (goal: <= 1.1). verify's child skips interpreter teardown (os._exit), which alone
can save TensorFlow seconds, so the script is also timed with the same shortcut: the
ratio against that run is the honest cost of the bootstrap and the hooks. SCRIPT must
accept ``--steps N`` and train exactly N steps. Both runs are on CPU
(CUDA_VISIBLE_DEVICES=-1) so the comparison does not depend on a GPU.

Besides wall time it reports CPU time (user + system of the child processes): on a
machine shared with other work, wall time varies by tens of percent from run to run while
CPU time barely moves, so compare ratios from one invocation, and prefer the CPU ratio
when the wall-time runs scatter.

"verify, no per-op" is verify with ``MPFIX_VERIFY_OPS=0`` (no per-op float16 evidence,
``mpfix/verify/_evidence.py``): the ratio of the two is the cost of that evidence alone.

"verify, no headroom" is verify with ``MPFIX_VERIFY_HEADROOM=0`` (no float16 layer-output
measurement): the ratio of the two is the cost of the headroom measurement alone.

``--compare ROOT`` also times verify from another mpfix checkout (e.g. ``git worktree add
/tmp/old HEAD~3``), interleaved with the others, for a before/after within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "verify" / "scripts"
DEFAULT_SCRIPT = SCRIPTS / "healthy_fit.py"


# Runs the script as __main__, then leaves without teardown, as verify's bootstrap does.
NO_TEARDOWN = (
    "import os, runpy, sys; sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__'); sys.stdout.flush(); os._exit(0)"
)

# Times one verify() call inside a fresh interpreter whose mpfix comes from ROOT; prints
# the wall time of the call, the CPU time of its children and the steps measured.
VERIFY = """
import json, resource, sys, time
from mpfix.verify.run import verify
script, steps = sys.argv[1], int(sys.argv[2])
start = time.perf_counter()
report = verify(script, ["--steps", str(steps)], steps=steps, baseline=False, device="cpu")
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "steps": len(report.mixed.steps),
                  "verdict": report.verdict.name}))
"""


def _env(**extra) -> dict:
    return dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2", **extra)


def time_direct(script: Path, steps: int, teardown: bool = True) -> tuple[float, float]:
    command = [sys.executable, str(script)] if teardown else [sys.executable, "-c", NO_TEARDOWN, str(script)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [*command, "--steps", str(steps)],
        cwd=script.parent,
        env=_env(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def time_verify(script: Path, steps: int, root: Path = ROOT, headroom: bool = True,
                ops: bool = True) -> tuple[float, float]:
    extra = {} if headroom else {"MPFIX_VERIFY_HEADROOM": "0"}
    if not ops:
        extra["MPFIX_VERIFY_OPS"] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", VERIFY, str(script), str(steps)],
        env=_env(PYTHONPATH=str(root), **extra),
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["steps"] != steps:
        raise SystemExit(f"verify ({root}) measured {result['steps']} steps, expected {steps}")
    return result["wall"], result["cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", nargs="?", type=Path, default=DEFAULT_SCRIPT)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another mpfix checkout to time verify from")
    args = parser.parse_args()
    script = args.script.resolve()
    runs = {
        "direct": lambda: time_direct(script, args.steps),
        "direct, no exit": lambda: time_direct(script, args.steps, teardown=False),
        "verify": lambda: time_verify(script, args.steps),
        "verify, no headroom": lambda: time_verify(script, args.steps, headroom=False),
        "verify, no per-op": lambda: time_verify(script, args.steps, ops=False),
    }
    if args.compare:
        runs["verify (compare)"] = lambda: time_verify(script, args.steps, args.compare.resolve())
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            times[name].append(run())

    def med(name, i):
        return statistics.median(t[i] for t in times[name])

    print(f"script  {script.name}, {args.steps} steps, {args.repeats} runs each (medians)")
    print(f"{'':18s} {'wall s':>7s} {'cpu s':>7s}   wall runs")
    for name in runs:
        print(f"{name:18s} {med(name, 0):7.2f} {med(name, 1):7.2f}   " + ", ".join(f"{w:.2f}" for w, _ in times[name]))
    bare = "direct, no exit"
    for name in [n for n in runs if n.startswith("verify")]:
        print(
            f"{name} / {bare}: wall {med(name, 0) / med(bare, 0):.3f}x, "
            f"cpu {med(name, 1) / med(bare, 1):.3f}x (goal <= 1.1x)"
        )
    print(f"verify / direct (with teardown): wall {med('verify', 0) / med('direct', 0):.3f}x")
    print(
        f"headroom (verify / verify, no headroom): wall {med('verify', 0) / med('verify, no headroom', 0):.3f}x, "
        f"cpu {med('verify', 1) / med('verify, no headroom', 1):.3f}x"
    )
    print(
        f"per-op evidence (verify / verify, no per-op): wall {med('verify', 0) / med('verify, no per-op', 0):.3f}x, "
        f"cpu {med('verify', 1) / med('verify, no per-op', 1):.3f}x (goal <= 1.1x)"
    )


if __name__ == "__main__":
    main()
