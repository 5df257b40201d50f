"""`mpfix verify --workers N` against running the same workers by hand, per scenario of
tests/verify/scripts/workers/mwms.py: the verdict, the wall times and their ratio, and the
processes left afterwards (`ps`; none expected).

    nice python benchmarks/verify_workers.py [--only NAME ...] [--steps 5] [--hang-after 15]

By hand = one group of the workers, each `python mwms.py --steps STEPS ARGS` with its
TF_CONFIG, until all end (a hanging group is killed after --by-hand-limit seconds and shown
as such). verify runs two groups (mixed, then float32 unless the mixed one hung or the
scenario is --no-baseline), so a ratio near 2 is the cost of the baseline itself.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "verify" / "scripts" / "workers" / "mwms.py"

# name: (workers, keras generation, script args, verify --no-baseline)
SCENARIOS = {
    "healthy-2": (2, 3, [], False),
    "healthy-3": (3, 3, [], False),
    "healthy-2-keras2": (2, 2, [], False),
    "nan-w1-keras3": (2, 3, ["--fault", "nan", "--worker", "1"], False),
    "nan-w2-keras2": (3, 2, ["--fault", "nan", "--worker", "2"], False),
    "overflow-w0-keras2": (2, 2, ["--fault", "overflow", "--worker", "0"], False),
    "underflow": (2, 3, ["--fault", "underflow"], False),
    "crash-w1": (3, 3, ["--fault", "crash", "--worker", "1", "--at", "2"], True),
    "hang-w0": (2, 3, ["--fault", "hang", "--worker", "0", "--at", "2"], True),
    "lso-outside-keras3": (2, 3, ["--lso", "outside"], True),
    "lso-outside-keras2": (2, 2, ["--lso", "outside"], True),
}


def _env(keras: int) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _left() -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(SCRIPT) in line and "_bootstrap" in line and " Z" not in line]


def by_hand(workers: int, keras: int, args: list[str], steps: int, limit: float) -> tuple[float, str]:
    sys.path.insert(0, str(ROOT))
    from mpfix.verify.workers import free_ports, tf_config

    ports = free_ports(workers)
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "--steps", str(steps), *args],
            env=dict(_env(keras), TF_CONFIG=tf_config(ports, i)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for i in range(workers)
    ]
    deadline = started + limit
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    hung = any(p.poll() is None for p in procs)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    codes = [p.returncode for p in procs]
    return time.monotonic() - started, ("hangs (killed)" if hung else f"exit {codes}")


def with_verify(workers, keras, args, steps, hang_after, no_baseline) -> tuple[float, str, int]:
    command = [sys.executable, "-m", "mpfix", "verify", "--workers", str(workers), str(SCRIPT), "--steps", str(steps),
               "--hang-after", str(hang_after), "--device", "cpu"]
    if no_baseline:
        command.append("--no-baseline")
    started = time.monotonic()
    done = subprocess.run([*command, "--", *args], capture_output=True, text=True, env=_env(keras), cwd=ROOT)
    return time.monotonic() - started, done.stdout.splitlines()[0] if done.stdout else done.stderr[-300:], done.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--hang-after", type=float, default=15.0)
    parser.add_argument("--by-hand-limit", type=float, default=90.0)
    options = parser.parse_args()
    rows = []
    for name, (workers, keras, args, no_baseline) in SCENARIOS.items():
        if options.only and name not in options.only:
            continue
        hand_s, hand = by_hand(workers, keras, args, options.steps, options.by_hand_limit)
        verify_s, verdict, code = with_verify(workers, keras, args, options.steps, options.hang_after, no_baseline)
        left = _left()
        row = {"scenario": name, "workers": workers, "keras": keras, "exit": code, "verdict": verdict,
               "verify_s": round(verify_s, 1), "by_hand_s": round(hand_s, 1), "by_hand": hand,
               "ratio": round(verify_s / hand_s, 2), "groups": 1 if no_baseline else 2, "left": left}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"{'scenario':<20} {'N':>2} {'K':>2} {'exit':>4} {'verify s':>9} {'by hand s':>10} {'ratio':>6}  by hand / left")
    for r in rows:
        print(f"{r['scenario']:<20} {r['workers']:>2} {r['keras']:>2} {r['exit']:>4} {r['verify_s']:>9} {r['by_hand_s']:>10} "
              f"{r['ratio']:>6}  {r['by_hand']} / {len(r['left'])} processes left")


if __name__ == "__main__":
    main()
