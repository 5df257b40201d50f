"""``mpfix repair`` on the scripts of tests/verify/scripts/repair/, both Keras generations.

    nice python benchmarks/repair_scripts.py [--steps N] [--only NAME ...] [--out FILE]

For each script and generation (Keras 3, then tf_keras with TF_USE_LEGACY_KERAS=1): one
``mpfix verify`` (mixed beside float32, timed), then ``mpfix repair --diff --json`` on a
copy (timed). Prints per run the verdict before -> after, the final loss of the mixed run
before and after beside float32's, the changes kept, the child runs, and repair's wall
time as a multiple of one verify (goal: <= 4x on the median script); then the diffs.
``--out FILE`` also saves everything as JSON. Wall times on a shared machine scatter by
tens of percent: compare ratios from one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "verify" / "scripts" / "repair"
# Helpers imported by the scripts, copied beside each.
HELPERS = ("mp_setup.py", "train_config.json", "pool_config.json")


def _env(legacy: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _timed(argv: list[str], cwd: Path, legacy: bool) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mpfix", *argv], cwd=cwd, env=_env(legacy), capture_output=True,
                          text=True)
    return time.perf_counter() - start, proc


def measure(name: str, legacy: bool, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for item in (name, *HELPERS):
            shutil.copy(SCRIPTS / item, folder / item)
        verify_s, _ = _timed(["verify", name, "--steps", str(steps), "--device", "cpu"], folder, legacy)
        report = folder / "repair.json"
        repair_s, proc = _timed(["repair", name, "--steps", str(steps), "--device", "cpu", "--diff", "--json",
                                 str(report)], folder, legacy)
        data = json.loads(report.read_text()) if report.exists() else {}
    runs = data.get("runs", {})
    return {
        "script": name,
        "keras": 2 if legacy else 3,
        "exit": proc.returncode,
        "before": data.get("verdict", {}).get("before", {}).get("name"),
        "after": data.get("verdict", {}).get("after", {}).get("name"),
        "loss_before": (runs.get("mixed_before") or {}).get("final_loss"),
        "loss_after": (runs.get("mixed_after") or {}).get("final_loss"),
        "loss_float32": (runs.get("float32") or {}).get("final_loss"),
        "changes": [f"{c['kind']}: {c['description']}" for c in data.get("changes", [])],
        "child_runs": data.get("child_runs"),
        "verify_s": round(verify_s, 1),
        "repair_s": round(repair_s, 1),
        "ratio": round(repair_s / verify_s, 2),
        "diff": data.get("diff", ""),
        "stderr": proc.stderr[-2000:] if proc.returncode not in (0, 10, 11, 12, 13, 14, 15, 16, 17, 18) else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", nargs="*", help="script names (default: every script with a docstring)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = args.only or sorted(p.name for p in SCRIPTS.glob("*.py") if p.name not in HELPERS)
    rows = []
    for name in names:
        for legacy in (False, True):
            row = measure(name, legacy, args.steps)
            rows.append(row)
            print(f"{row['script']:<22} k{row['keras']}  {row['before']} -> {row['after']} (exit {row['exit']})  "
                  f"loss {row['loss_before']} -> {row['loss_after']} (float32 {row['loss_float32']})  "
                  f"runs {row['child_runs']}  verify {row['verify_s']} s  repair {row['repair_s']} s  "
                  f"= {row['ratio']}x  {'; '.join(row['changes']) or 'no change'}", flush=True)
            if row["stderr"]:
                print(row["stderr"], flush=True)
    ratios = [r["ratio"] for r in rows]
    print(f"median repair/verify: {statistics.median(ratios):.2f}x over {len(rows)} runs (goal <= 4x)")
    for row in rows:
        if row["diff"]:
            print(f"\n## {row['script']} (Keras {row['keras']})\n{row['diff']}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
