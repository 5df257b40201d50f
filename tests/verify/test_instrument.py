"""mpfix instrument: the LibCST transform, its command, and the instrumented scripts
running for real."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from verify_helpers import SCRIPTS
from mpfix.verify.instrument import instrument
from mpfix.verify.instrument_transform import instrument_source


def test_keras3_step_gets_both_checks_and_dynamic_scale():
    new, changed = instrument_source((SCRIPTS / "healthy_loop.py").read_text())
    assert changed == 1
    lines = [line.strip() for line in new.splitlines()]
    i = lines.index("scaled_loss = optimizer.scale_loss(loss)")
    assert lines[i - 1] == 'loss = tf.debugging.check_numerics(loss, "loss before scaling")'
    assert lines[i + 1] == 'scaled_loss = tf.debugging.check_numerics(scaled_loss, "loss after scaling")'
    j = lines.index("optimizer.apply_gradients(zip(grads, model.trainable_variables))")
    assert lines[j + 1] == (
        'tf.print("loss scale:", optimizer.dynamic_scale if hasattr(optimizer, "dynamic_scale") '
        "else (optimizer.loss_scale_factor or 1.0))"
    )
    compile(new, "healthy_loop.py", "exec")


def test_tf_keras_file_is_keras2_whatever_the_option():
    new, changed = instrument_source((SCRIPTS / "k2_loop.py").read_text(), keras=3)
    assert changed == 1
    assert 'tf.print("loss scale:", optimizer.loss_scale)' in new
    assert "dynamic_scale" not in new
    assert "optimizer.get_scaled_loss(loss)" in new


def test_second_run_changes_nothing():
    once, _ = instrument_source((SCRIPTS / "healthy_loop.py").read_text())
    twice, changed = instrument_source(once)
    assert changed == 0 and twice == once


def test_unscaled_loop_gets_a_loss_check_and_import_is_added_after_future():
    source = (
        '"""doc"""\nfrom __future__ import annotations\nfrom tensorflow import GradientTape\n\n'
        "def step(f, v):\n    with GradientTape() as t:\n        l = f()\n    return t.gradient(l, v)\n"
    )
    new, changed = instrument_source(source)
    assert changed == 1
    assert new.splitlines()[1] == "from __future__ import annotations"
    assert "import tensorflow as tf" in new
    assert '        l = tf.debugging.check_numerics(l, "loss")' in new
    compile(new, "x.py", "exec")


def test_command_diff_and_output(tmp_path):
    runner = CliRunner()
    result = runner.invoke(instrument, [str(SCRIPTS / "healthy_loop.py")])
    assert result.exit_code == 0
    assert '+        loss = tf.debugging.check_numerics(loss, "loss before scaling")' in result.output
    out = tmp_path / "copy.py"
    result = runner.invoke(instrument, [str(SCRIPTS / "healthy_loop.py"), "-o", str(out)])
    assert result.exit_code == 0 and out.exists()
    compile(out.read_text(), str(out), "exec")


def test_command_rejects_unparsable_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    result = CliRunner().invoke(instrument, [str(bad)])
    assert result.exit_code == 2
    assert "cannot parse" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("name", ["healthy_loop.py", pytest.param("k2_loop.py", marks=pytest.mark.keras2)])
def test_instrumented_script_runs_and_prints_the_scale(tmp_path, name):
    new, _ = instrument_source((SCRIPTS / name).read_text())
    path = tmp_path / name
    path.write_text(new)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(path), "--steps", "3"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("loss scale:")]
    assert len(printed) == 3
    # Starts at the default 32768; the script runs unseeded here, so an early overflow
    # may halve it: every value is still a power of two.
    scales = [float(line.split(":")[1]) for line in printed]
    assert scales[0] == 32768.0
    assert all(math.log2(s).is_integer() for s in scales)


@pytest.mark.slow
def test_instrumented_plain_keras3_optimizer_runs(tmp_path):
    """A plain Keras 3 optimizer has scale_loss but no dynamic_scale: the inserted print
    must fall back to its loss_scale_factor instead of raising AttributeError (as the
    unguarded ``optimizer.dynamic_scale`` did)."""
    factor, expected = "128", 128.0
    name = "k3_plain_scale_loss.py"
    new, changed = instrument_source((SCRIPTS / name).read_text())
    assert changed == 1 and "dynamic_scale" in new  # the guarded form, not a different print
    path = tmp_path / name
    path.write_text(new)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, str(path), "--steps", "3"] + (["--factor", factor] if factor else [])
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("loss scale:")]
    assert [float(line.split(":")[1]) for line in printed] == [expected] * 3


def test_the_diff_counts_rows_as_python_does_so_git_applies_it(tmp_path):
    """A form feed inside a comment is inside its line (str.splitlines split it, and the diff's hunk rows
    and text no longer matched the file)."""
    script = tmp_path / "loop.py"
    text = (SCRIPTS / "healthy_loop.py").read_text()
    at = text.index("loss = ")
    start = text.rindex("\n", 0, at) + 1
    # Right above the line the instrumentation changes, so the diff's hunk holds it.
    script.write_text(text[:start] + text[start:at] + "# page \x0c break\n" + text[start:])
    result = CliRunner().invoke(instrument, [str(script)])
    assert result.exit_code == 0
    patch = tmp_path / "p.diff"
    patch.write_text(result.output.replace(str(script), "loop.py").replace("loop.py (instrumented)", "loop.py"))
    written = tmp_path / "written.py"
    assert CliRunner().invoke(instrument, [str(script), "-o", str(written)]).exit_code == 0
    applied = subprocess.run(["git", "apply", "--unsafe-paths", "-p0", str(patch)], cwd=tmp_path,
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert script.read_text() == written.read_text()
