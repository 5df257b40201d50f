"""The verdict of every verify test script, expected vs actual, as a Markdown table.

    python tests/verify/verdict_table.py [--root CHECKOUT] [--only NAME ...]

Runs ``mpfix.verify.run.verify`` from CHECKOUT (default: this one) on each script of
tests/verify/scripts (and the sample the headroom test uses) with the options its test
uses, on CPU, one after the other. ``--root`` of an older checkout (``git worktree add
/tmp/old COMMIT``) gives the "before" column for a change; the scripts always come from
this checkout. Not a test: the tests assert these verdicts (and more) themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
SAMPLES = HERE.parents[1] / "samples"

# (label, script, script args, verify options, expected verdict)
CASES = [
    ("abrupt.py --exit-after 10", "abrupt.py", ["--exit-after", "10"], {"steps": 50, "baseline": False}, "healthy (10 steps)"),
    ("abrupt.py --hang-after 5", "abrupt.py", ["--hang-after", "5"], {"steps": 50, "jobs": 1, "timeout": 20}, "timeout (5 steps, no float32 run)"),
    ("both_diverge.py", "both_diverge.py", [], {}, "unstable"),
    ("converged_flat.py --no-baseline", "converged_flat.py", [], {"baseline": False}, "healthy"),
    ("dcgan.py", "dcgan.py", [], {"steps": 6, "baseline": False}, "healthy (generator loss < 1 < discriminator loss)"),
    ("exits.py (no --data)", "exits.py", [], {"baseline": False}, "crashed (exit status 2)"),
    ("exits.py --code 3", "exits.py", ["--data", "d", "--code", "3"], {"baseline": False}, "crashed (exit status 3)"),
    ("exits.py --die", "exits.py", ["--data", "d", "--die"], {"baseline": False}, "crashed (SIGKILL, stderr shown)"),
    ("f16_head_regression.py", "f16_head_regression.py", [], {"steps": 30}, "diverged"),
    ("gan.py --critic 2", "gan.py", ["--critic", "2"], {"steps": 4, "baseline": False}, "healthy"),
    ("graph_error.py --mode trace", "graph_error.py", ["--mode", "trace"], {"baseline": False}, "crashed (at graph_error.py:25)"),
    ("graph_error.py --mode run", "graph_error.py", ["--mode", "run"], {"baseline": False}, "crashed (at graph_error.py:28)"),
    ("hang.py (SIGTERM/SIGHUP/SIGKILL to mpfix)", None, [], {}, "no process left (test_lifecycle)"),
    ("healthy_fit.py", "healthy_fit.py", [], {}, "healthy"),
    ("healthy_loop.py", "healthy_loop.py", [], {}, "healthy"),
    ("k2_loop.py", "k2_loop.py", [], {"env": {"TF_USE_LEGACY_KERAS": "1"}}, "healthy"),
    ("k2_minimize.py", "k2_minimize.py", [], {}, "healthy (loss unscaled)"),
    ("k2_softmax_stall.py", "k2_softmax_stall.py", [], {"steps": 20, "env": {"TF_USE_LEGACY_KERAS": "1"}}, "stalled"),
    ("k3_plain_scale_loss.py", "k3_plain_scale_loss.py", [], {}, "healthy"),
    ("k3_underflow.py", "k3_underflow.py", [], {}, "underflow"),
    ("k3_underflow_fixed.py", "k3_underflow_fixed.py", [], {}, "healthy"),
    ("late_nan.py", "late_nan.py", [], {}, "non-finite (float32 only from step 8)"),
    ("legacy_env.py", "legacy_env.py", [], {}, "healthy (Keras 2)"),
    ("loss_input.py", "loss_input.py", [], {"steps": 4, "baseline": False}, "stalled (warm-up skips; loss input measured)"),
    ("mask_nan.py", "mask_nan.py", [], {}, "non-finite"),
    ("mirrored.py", "mirrored.py", [], {"steps": 8}, "healthy"),
    ("no_steps.py", "no_steps.py", [], {"baseline": False}, "no-steps"),
    ("pure_float16.py", "pure_float16.py", [], {}, "non-finite (float32 baseline finite)"),
    ("raises.py", "raises.py", [], {"baseline": False}, "crashed"),
    ("sgd_clip_warmup.py", "sgd_clip_warmup.py", [], {"steps": 50}, "healthy"),
    ("sleeps.py", "sleeps.py", ["PIDFILE"], {"baseline": False, "timeout": 15}, "timeout"),
    ("train.ipynb", "train.ipynb", [], {}, "healthy"),
    ("samples/float16_regression_head.py (defaults)", str(SAMPLES / "float16_regression_head.py"), [], {"steps": 50}, "at-risk"),
]

RUN = r"""
import json, sys, tempfile, os
from pathlib import Path
from mpfix.verify.run import verify
cases = json.loads(sys.argv[1])
for label, script, args, options in cases:
    args = [tempfile.mktemp() if a == "PIDFILE" else a for a in args]
    opts = dict(steps=12, device="cpu", jobs=2, timeout=300)
    opts.update(options)
    try:
        report = verify(Path(script), args, **opts)
        v = report.verdict
        extra = f"{report.mixed.step_count} steps"
        if report.baseline is None and opts.get("baseline", True):
            extra += ", no float32 run"
        if len(report.mixed.optimizers) > 1:
            extra += ", losses " + "/".join(f"{report.mixed.losses_of(o)[-1]:.2f}" for o in report.mixed.optimizers if report.mixed.losses_of(o))
        if v.name == "non-finite" and report.baseline is not None:
            bad = [s.step for s in report.baseline.steps if s.loss is not None and s.loss != s.loss]
            extra += f", float32 non-finite at {bad[:1] or 'none'}"
        if report.mixed.steps and report.mixed.steps[0].loss is not None and report.baseline is not None and report.baseline.steps:
            extra += f", loss[0] {report.mixed.steps[0].loss:.4g} vs {report.baseline.steps[0].loss:.4g}"
        if v.name == "crashed":
            extra += " | " + v.summary[:90]
        result = f"{v.name} ({extra})"
    except Exception as exc:
        result = f"error: {type(exc).__name__}: {str(exc)[:80]}"
    print(json.dumps([label, result]), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE.parents[1])
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    cases = [
        (label, str(SCRIPTS / script) if not os.path.isabs(script) else script, sargs, options)
        for label, script, sargs, options, _ in CASES
        if script and (not args.only or label.split()[0] in args.only)
    ]
    env = dict(os.environ, PYTHONPATH=str(args.root.resolve()), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_USE_LEGACY_KERAS", None)
    proc = subprocess.run([sys.executable, "-c", RUN, json.dumps(cases)], env=env, capture_output=True, text=True, cwd="/")
    results = dict(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("["))
    print("| script | expected | actual |")
    print("|---|---|---|")
    for label, script, _, _, expected in CASES:
        print(f"| {label} | {expected} | {results.get(label, 'not run here') if script else 'see test'} |")
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)


if __name__ == "__main__":
    main()
