"""The verify command end to end, its JSON/HTML reports, --before-after, --device, and
the promise that the parent never imports TensorFlow."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from verify_helpers import SCRIPTS, verify_script
from mpfix.verify import report_html, report_json
from mpfix.verify.cli import verify


def test_importing_the_commands_does_not_import_tensorflow():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import mpfix.verify.cli, mpfix.verify.instrument"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert "click" in imported  # the measurement works
    assert not imported & {"tensorflow", "keras", "tf_keras", "numpy", "libcst"}


@pytest.fixture(scope="module")
def fit_report():
    return verify_script("healthy_fit.py", steps=8)


@pytest.mark.slow
def test_json_report_has_every_step_of_both_runs(fit_report, tmp_path):
    path = tmp_path / "report.json"
    report_json.write(fit_report, path)
    data = json.loads(path.read_text())  # strict: no NaN/Infinity literals
    assert data["verdict"]["name"] == "healthy" and data["verdict"]["exit_code"] == 0
    assert data["keras"] == 3
    for run in ("mixed", "float32"):
        steps = data["runs"][run]["steps"]
        assert [s["step"] for s in steps] == list(range(8))
        assert set(steps[0]) >= {"loss", "loss_scale", "skipped", "nonfinite_fraction", "zero_fraction", "grad_norm"}
    assert data["runs"]["mixed"]["steps"][0]["loss_scale"] == 32768.0
    assert data["runs"]["float32"]["steps"][0]["loss_scale"] == 1.0


@pytest.mark.slow
def test_html_report_is_self_contained_with_both_plots(fit_report, tmp_path):
    path = tmp_path / "report.html"
    report_html.write(fit_report, path)
    page = path.read_text()
    assert page.count("<svg") == 2
    assert 'class="series-mixed"' in page and 'class="series-float32"' in page
    assert "HEALTHY" in page
    # No external assets: the only URL is the SVG namespace.
    urls = set(re.findall(r"(?:https?:)?//[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert "<script" not in page and "<link" not in page and "src=" not in page


def test_html_marks_non_finite_steps():
    from mpfix.verify.records import RunResult, Step

    run = RunResult("mixed", steps=[Step(0, float("nan"), 32768.0, True, True, 1.0, 0.0, None)])
    svg = report_html.svg_plot("loss", {"mixed": report_html._series(run, "loss")}, "loss")
    assert 'class="nonfinite"' in svg


@pytest.mark.slow
def test_cli_crash_exit_code_summary_and_json(tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        verify, [str(SCRIPTS / "raises.py"), "--no-baseline", "--device", "cpu", "--json", str(out)]
    )
    assert result.exit_code == 14, result.output
    assert "CRASHED (exit 14)" in result.output
    assert "raises.py:8 in load_batches()" in result.output
    data = json.loads(out.read_text())
    assert data["verdict"]["evidence"]["frame"]["line"] == 8
    assert data["runs"]["float32"] is None


@pytest.mark.slow
def test_cli_passes_script_arguments_after_double_dash():
    result = CliRunner().invoke(
        verify, [str(SCRIPTS / "healthy_loop.py"), "--no-baseline", "--device", "cpu", "--steps", "3", "--", "--steps", "2"]
    )
    # The script stops itself after 2 steps: fewer than asked for, and still judged.
    assert result.exit_code == 0, result.output
    assert "steps    2" in result.output


@pytest.mark.slow
def test_device_gpu_fails_clearly_without_gpu():
    result = CliRunner().invoke(
        verify, [str(SCRIPTS / "healthy_loop.py"), "--no-baseline", "--device", "gpu", "--steps", "1"]
    )
    assert result.exit_code == 2
    assert "no GPU is visible" in result.output


@pytest.mark.slow
def test_before_after_prints_both_verdicts():
    result = CliRunner().invoke(
        verify,
        [
            str(SCRIPTS / "k3_underflow.py"),
            "--before-after",
            str(SCRIPTS / "k3_underflow_fixed.py"),
            "--device",
            "cpu",
            "--steps",
            "8",
            "--jobs",
            "2",
        ],
    )
    assert "before (original)" in result.output and "after (patched)" in result.output
    assert "verdict: underflow -> healthy" in result.output
    assert result.exit_code == 0, result.output
