"""Display-only fixes (Ruff's third applicability): shown, never written by `apply`, tried by `mpfix repair`
(which keeps one only when a run proves it). MP111's Keras 3 `lso.inner_optimizer` of `scale_loss`
gradients is the first: a hand unscale the path cannot see would make "apply through the LSO" unscale twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options
from mpfix.findings import Finding, Fix, FixSafety, Position

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))

STEP = textwrap.dedent("""
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05))


    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.inner_optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
""").lstrip("\n")


def _lint(fix: bool, display_only: bool = False):
    options = Options(keras="3", unsafe_fixes=True, project_policy=False, display_only_fixes=display_only)
    return Engine(MP1, options).lint(STEP, Path("train.py"), fix=fix)


def test_the_inner_optimizer_finding_carries_a_display_only_fix_that_apply_never_writes():
    (finding,) = _lint(fix=False).findings
    assert finding.code == "MP111" and finding.fix is not None and finding.fix.safety is FixSafety.DISPLAY_ONLY
    assert not finding.fixable(unsafe_fixes=True)
    assert _lint(fix=True).fixed_text is None
    # What repair asks for: the same edit, through the engine's fix loop and validation.
    fixed = _lint(fix=True, display_only=True).fixed_text
    assert fixed is not None and "    optimizer.apply_gradients(zip(grads" in fixed and "inner_optimizer" not in fixed
    compile(fixed, "train.py", "exec")


def test_fixable_keeps_the_three_applicabilities_apart():
    def finding(safety):
        return Finding("MP000", "m", "f.py", Position(1, 1), Position(1, 2), fix=Fix({}, safety, "d"))

    assert [finding(s).fixable(False) for s in FixSafety] == [s is FixSafety.SAFE for s in FixSafety]
    assert [finding(s).fixable(True) for s in FixSafety] == [s in (FixSafety.SAFE, FixSafety.UNSAFE) for s in FixSafety]
    assert finding(FixSafety.DISPLAY_ONLY).fixable(True, display_only=True)
    assert not finding(FixSafety.NONE).fixable(True, display_only=True)


def test_the_cli_shows_it_and_apply_leaves_the_file_as_it_was(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(STEP)
    (tmp_path / "pyproject.toml").write_text("[tool.mpfix]\nkeras = \"3\"\n")
    mpfix = [sys.executable, "-m", "mpfix"]
    shown = subprocess.run([*mpfix, "check", "--no-cache", "--format", "json", str(script)], capture_output=True,
                           text=True, cwd=tmp_path)
    (entry,) = json.loads(shown.stdout)
    assert entry["code"] == "MP111" and entry["fix"]["applicability"] == "display-only", entry
    assert entry["fix"]["edits"], entry
    text = subprocess.run([*mpfix, "check", "--no-cache", str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert "MP111 [*]" not in text.stdout and "MP111" in text.stdout
    before = script.read_bytes()
    applied = subprocess.run([*mpfix, "apply", "--no-cache", "--unsafe-fixes", str(script)], capture_output=True,
                             text=True, cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout + applied.stderr  # the finding remains
    assert script.read_bytes() == before
