"""``mpfix repair`` and the per-op evidence, on real TensorFlow (CPU), both Keras generations.

Few and short (8-10 steps): each repair runs several children. The scripts are in
tests/verify/scripts/repair/ and are not caught by the static rules (asserted).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
REPAIR = SCRIPTS / "repair"

pytestmark = pytest.mark.slow


def _mpfix(*args: str, cwd: Path, legacy: bool = False, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return subprocess.run([sys.executable, "-m", "mpfix", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _copy(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(REPAIR / name, tmp_path / name)
    return tmp_path / names[0]


def _bootstraps_under(folder: Path) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if "mpfix.verify._bootstrap" in line and str(folder) in line]


def test_repair_writes_a_float32_island_around_overflowing_attention_scores(tmp_path):
    script = _copy(tmp_path, "attention_scores.py")
    report = tmp_path / "repair.json"
    result = _mpfix("repair", script.name, "--steps", "8", "--device", "cpu", "--json", str(report), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "attention_scores.py: non-finite -> healthy (exit 0)" in result.stdout
    assert "MP901 float16 `BatchMatMulV2` gave inf/NaN from finite inputs at step 0" in result.stdout
    text = script.read_text()
    assert ("weights = tf.cast(tf.nn.softmax(tf.matmul(tf.cast(q, tf.float32), tf.cast(k, tf.float32), "
            "transpose_b=True), axis=-1), self.compute_dtype)") in text
    data = json.loads(report.read_text())
    assert data["verdict"]["before"]["name"] == "non-finite" and data["verdict"]["after"]["name"] == "healthy"
    assert [c["kind"] for c in data["changes"]] == ["float32 island"]
    assert data["findings"][0]["location"]["row"] == 25 and data["findings"][0]["code"] == "MP901"
    assert data["mpfix_version"] and data["command"].endswith("--json " + str(report))
    assert not _bootstraps_under(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_scores.py", "repair.json"]


def test_repair_ends_a_dtype_mix_crash_then_the_overflow_it_hid_in_an_eager_loop(tmp_path):
    """A float16 regulariser added to a float32 loss crashes the step; the cast that ends the
    crash leaves exp's overflow, which the next round keeps float32 into the loss. Eager: no op
    is traced, so that round's op comes from a --locate re-run (the traced form of the same
    script is benchmarks/repair_scripts.py's)."""
    script = _copy(tmp_path, "dtype_mix_loss.py")
    result = _mpfix("repair", script.name, "--steps", "6", "--device", "cpu", "--", "--eager", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dtype_mix_loss.py: crashed -> healthy (exit 0)" in result.stdout, result.stdout
    assert "cast at a dtype mix: `reg` cast to float32 where it meets" in result.stdout
    assert "first NaN/Inf of an eager re-run" in result.stdout
    lines = [line.strip() for line in script.read_text().splitlines()]
    assert "reg = tf.reduce_mean(tf.exp(tf.cast(feats, tf.float32) * 5.0))" in lines
    assert "return tf.reduce_mean(tf.square(y - pred)) + 1e-6 * tf.cast(reg, tf.float32)" in lines


def test_repair_casts_a_concat_of_float32_coordinates_to_the_layers_compute_dtype(tmp_path):
    script = _copy(tmp_path, "coord_concat.py")
    result = _mpfix("repair", script.name, "--steps", "4", "--device", "cpu", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "coord_concat.py: crashed -> healthy (exit 0)" in result.stdout, result.stdout
    assert "Tensors in list passed to 'values' of 'ConcatV2' Op have types [float16, float32]" in result.stdout
    assert "return tf.concat([x, tf.cast(grid, self.compute_dtype)], axis=-1)" in script.read_text()


def test_repair_never_changes_a_healthy_script(tmp_path):
    script = tmp_path / "healthy_loop.py"
    shutil.copy(SCRIPTS / "healthy_loop.py", script)
    # CRLF newlines and no newline at the end: a byte-identical check that would catch a rewrite.
    script.write_bytes(script.read_bytes().replace(b"\n", b"\r\n").rstrip(b"\r\n"))
    before = script.read_bytes()
    result = _mpfix("repair", script.name, "--steps", "6", "--device", "cpu", "--", "--steps", "6", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "healthy -> healthy (exit 0)" in result.stdout
    assert script.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["healthy_loop.py"]


def test_repair_on_tf_keras_puts_the_log_of_float16_probabilities_in_float32(tmp_path):
    script = _copy(tmp_path, "log_probs.py")
    result = _mpfix("repair", script.name, "--steps", "8", "--device", "cpu", "--diff", cwd=tmp_path, legacy=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "log_probs.py: non-finite -> healthy (exit 0)" in result.stdout
    # The Log op is found at its line (MP901, or the static rule's code once a static rule
    # flags that line: MP204 learnt log(softmax) after this script was written).
    assert re.search(r"log_probs\.py:23:16: MP(901|204) ", result.stdout), result.stdout
    changed = [line for line in result.stdout.splitlines() if line.startswith("+ ") or line.startswith("+    ")]
    assert len(changed) == 1 and ("log_softmax" in changed[0] or "tf.float32" in changed[0]), changed
    assert script.read_bytes() == (REPAIR / "log_probs.py").read_bytes()  # --diff writes nothing


def test_repair_adds_loss_scaling_when_the_policy_comes_from_an_imported_module(tmp_path):
    script = _copy(tmp_path, "imported_policy.py", "mp_setup.py", "train_config.json")
    result = _mpfix("repair", script.name, "--steps", "10", "--device", "cpu", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "imported_policy.py: underflow -> healthy (exit 0)" in result.stdout
    assert "LossScaleOptimizer" in script.read_text() and "scale_loss" in script.read_text()
    assert (tmp_path / "mp_setup.py").read_bytes() == (REPAIR / "mp_setup.py").read_bytes()


def test_locate_names_the_layer_line_from_the_evidence_without_a_rerun(tmp_path):
    from mpfix.verify.run import verify

    script = _copy(tmp_path, "dense_overflow.py")
    report = verify(script, steps=4, baseline=False, device="cpu", locate=True)
    assert report.verdict.name == "non-finite"
    assert report.located_run is None  # the evidence named the op: no eager re-run
    assert report.location.frame["line"] == 19  # keras.layers.Dense(16, ...), not model.fit (line 24)
    assert report.location.op == "MatMul"
    from mpfix.verify.report_text import render

    text = render(report)
    assert "dense_overflow.py:19:5: MP901 float16 `MatMul` gave inf/NaN from finite inputs at step 0, inside layer" \
           in text


def test_repair_is_bounded_by_its_timeout_and_leaves_no_process(tmp_path):
    script = tmp_path / "hang.py"
    shutil.copy(SCRIPTS / "hang.py", script)
    result = _mpfix("repair", script.name, "--timeout", "12", "--device", "cpu", cwd=tmp_path, timeout=300)
    assert result.returncode == 15, result.stdout + result.stderr  # the verdict's code: timeout
    assert "hang.py: timeout -> timeout (exit 15)" in result.stdout
    assert "nothing to repair" in result.stdout
    assert not _bootstraps_under(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hang.py"]


def test_verify_writes_the_runtime_findings_as_sarif(tmp_path):
    script = _copy(tmp_path, "dense_overflow.py")
    out = tmp_path / "found.sarif"
    result = _mpfix("verify", script.name, "--steps", "3", "--no-baseline", "--device", "cpu", "--sarif", str(out),
                    cwd=tmp_path)
    assert result.returncode == 10, result.stdout + result.stderr
    log = json.loads(out.read_text())
    first = log["runs"][0]["results"][0]
    assert first["ruleId"] == "MP901" and first["properties"]["runtime"] is True and first["properties"]["op"] == "MatMul"
    assert first["locations"][0]["physicalLocation"]["region"]["startLine"] == 19
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("dense_overflow.py")
