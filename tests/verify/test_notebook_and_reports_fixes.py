"""`verify x.ipynb`, and the report fixes of issue 14: --html/--json to a missing folder
fail before the run, a near-constant loss is drawn flat with distinct tick labels, and the
HTML of --before-after shows the combined verdict."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from verify_helpers import SCRIPTS, verify_script
from mpfix.verify import report_html
from mpfix.verify.cli import verify
from mpfix.verify.records import RunResult, Step


@pytest.mark.slow
def test_notebook_code_cells_run_as_a_script():
    """train.ipynb has %magic, !shell, a %%bash cell and `model?`: handled as `check` handles
    them (not run), the Python cells run in order in one namespace."""
    report = verify_script("train.ipynb")
    assert report.mixed.crash is None, report.verdict.summary
    assert report.verdict.name == "healthy", report.verdict.summary
    assert report.mixed.step_count == 12 and report.mixed.end["entries"] == ["fit"]


@pytest.mark.slow
def test_notebook_crash_is_reported_at_its_cell_and_line(tmp_path):
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "%load_ext autoreload\nimport tensorflow as tf\n"},
        {"cell_type": "markdown", "metadata": {}, "source": "# data"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "x = 1\ny = tf.reshape(tf.zeros([6]), [4, -1])\n"},
    ]
    path = tmp_path / "broken.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    report = verify_script(str(path), baseline=False)
    v = report.verdict
    assert v.name == "crashed", v.summary
    assert "broken.ipynb cell 3, line 2" in v.summary


def test_not_a_notebook_is_a_clear_usage_error(tmp_path):
    path = tmp_path / "empty.ipynb"
    path.write_text("{}")
    result = CliRunner().invoke(verify, [str(path), "--no-baseline"])
    assert result.exit_code == 2
    assert "not a notebook verify can run" in result.output


@pytest.mark.parametrize("option", ["--html", "--json"])
def test_report_to_a_missing_folder_fails_before_the_run(tmp_path, option):
    missing = tmp_path / "missing" / "r.out"
    result = CliRunner().invoke(verify, [str(SCRIPTS / "hang.py"), "--no-baseline", option, str(missing)])
    # hang.py never ends: reaching the run would time out this test instead.
    assert result.exit_code == 2, result.output
    assert f"{option} {missing}: the folder {missing.parent} does not exist" in result.output
    assert "Traceback" not in result.output


def _ticks(svg):
    return re.findall(r'class="ytick"[^>]*>([^<]*)<', svg)


def _ys(svg):
    points = re.search(r'<polyline[^>]*points="([^"]+)"', svg).group(1)
    return [float(p.split(",")[1]) for p in points.split()]


def test_near_constant_loss_is_flat_with_distinct_ticks():
    losses = [1.394e-6 * (1 + 1e-7 * i) for i in range(10)]  # constant but for float noise
    run = RunResult("mixed", steps=[Step(i, x, 32768.0, True, False, 0.0, 0.0, 1.0) for i, x in enumerate(losses)])
    svg = report_html.svg_plot("Loss per step", {"mixed": report_html._series(run, "loss")}, "loss")
    ticks = _ticks(svg)
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    ys = _ys(svg)
    assert max(ys) - min(ys) < 1.0  # flat, not a fall across the whole plot
    assert "constant to 0.001 relative" in svg
    # A loss that really moves is drawn across the plot as before.
    moving = RunResult("mixed", steps=[Step(i, 1.0 - 0.05 * i, 1.0, False, False, 0.0, 0.0, 1.0) for i in range(10)])
    ys = _ys(report_html.svg_plot("Loss per step", {"mixed": report_html._series(moving, "loss")}, "loss"))
    assert max(ys) - min(ys) > 100


@pytest.mark.slow
def test_before_after_html_shows_the_combined_verdict(tmp_path):
    page = tmp_path / "pair.html"
    result = CliRunner().invoke(
        verify,
        [
            str(SCRIPTS / "k3_underflow.py"), "--before-after", str(SCRIPTS / "k3_underflow_fixed.py"),
            "--device", "cpu", "--steps", "6", "--jobs", "2", "--no-baseline", "--html", str(page),
        ],
    )
    assert result.exit_code == 0, result.output
    text = page.read_text()
    combined = re.search(r'<p class="verdict combined[^"]*">(.*?)</p>', text)
    assert combined is not None
    assert re.sub(r"<[^>]+>", "", combined.group(1)).replace("&rarr;", "->") == "verdict: underflow -> healthy (exit 0)"
    assert text.index("verdict combined") < text.index("before (original)")
