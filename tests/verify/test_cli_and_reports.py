"""The verify command end to end, its JSON/HTML reports, --before-after, --device, and
the promise that the parent never imports TensorFlow."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from verify_helpers import SCRIPTS, decode_png, verify_script
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
    assert 'class="nonfinite"' in svg and ">NaN/Inf<" in svg


def _run(mode, losses, scales=None, skipped=(), optimizers=1):
    from mpfix.verify.records import RunResult, Step

    steps = []
    for i, loss in enumerate(losses):
        for o in range(optimizers):
            scale = scales[i] if scales else 1.0
            steps.append(Step(i, loss * (1 + o), scale, scales is not None, i in skipped, 0.0, 0.0, 1.0, optimizer=o))
    return RunResult(mode, steps=steps, end={"event": "end"})


def _ticks(svg, kind="ytick"):
    return re.findall(rf'class="{kind}"[^>]*>([^<]*)<', svg)


def test_html_loss_axis_goes_log_when_losses_span_decades():
    """A run plateauing at 0.33 beside one reaching 1e-6 is two flat lines on a linear
    axis: the loss gets a log axis labelled with the losses themselves."""
    runs = {"mixed": _run("mixed", [10, 1, 0.4, 0.33, 0.33]), "float32": _run("float32", [10, 1, 0.01, 1e-4, 1e-6])}
    svg = report_html.svg_plot("Loss per step", report_html._all_series(runs, "loss"), "loss")
    assert 'data-scale="log10"' in svg
    assert {"1e-6", "1e-4", "0.01", "1"} <= set(_ticks(svg))
    assert "loss (log scale)" in svg and 'class="xlabel"' in svg and ">step<" in svg
    # Close losses stay linear, with several ticks, not just min and max.
    runs = {"mixed": _run("mixed", [0.7, 0.5, 0.4]), "float32": _run("float32", [0.7, 0.5, 0.41])}
    svg = report_html.svg_plot("Loss per step", report_html._all_series(runs, "loss"), "loss")
    assert 'data-scale="linear"' in svg and len(_ticks(svg)) >= 3
    assert [int(t) for t in _ticks(svg, "xtick")] == [0, 1, 2]


def test_html_loss_scale_is_log2_labelled_with_the_scale_and_marks_skipped_steps():
    scales = [32768.0 / 2**i for i in range(16)]
    runs = {
        "mixed": _run("mixed", [1.0] * 16, scales=scales, skipped=set(range(16))),
        "float32": _run("float32", [1.0] * 16),
    }
    svg = report_html.svg_plot("Loss scale per step", report_html._all_series(runs, "loss_scale"), "loss scale", "log2")
    assert 'data-scale="log2"' in svg
    assert {"32768", "1"} <= set(_ticks(svg)) and "3.277e+04" not in svg
    assert svg.count('class="skipped"') == 16 and ">skipped<" in svg  # with a legend entry


def test_html_one_line_per_optimizer_and_healthy_is_green():
    runs = {"mixed": _run("mixed", [1.0, 0.9], optimizers=2), "float32": _run("float32", [1.0, 0.9], optimizers=2)}
    svg = report_html.svg_plot("Loss per step", report_html._all_series(runs, "loss"), "loss")
    assert svg.count("<polyline") == 4 and svg.count('stroke-dasharray="6 4"') >= 2
    assert ">mixed #1<" in svg and ">float32 #0<" in svg
    # The later CSS rule wins at equal specificity: green must come after red.
    style = report_html.STYLE
    assert style.index(".verdict-healthy b") > style.index(".verdict b")


@pytest.mark.slow
def test_html_report_renders_in_headless_chromium(fit_report, tmp_path):
    """The real report in a real browser: the screenshot exists, has the window's size,
    and shows both runs' colours (not a blank or error page). CI installs no chromium:
    then this is skipped, and the content checks above still run."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium); HTML content is checked without it")
    page, shot = tmp_path / "report.html", tmp_path / "report.png"
    report_html.write(fit_report, page)
    subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1400,900",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert shot.exists(), "chromium wrote no screenshot"
    width, height, bpp, rows = decode_png(shot.read_bytes())
    assert (width, height) == (1400, 900)
    colours = {row[i : i + 3] for row in rows[::2] for i in range(0, len(row), bpp * 2)}
    assert len(colours) > 50  # text, axes, lines: not a blank page

    def near(colour, target, tolerance=40):
        return all(abs(a - b) <= tolerance for a, b in zip(colour, target))

    mixed, float32 = report_html.COLOURS["mixed"], report_html.COLOURS["float32"]
    for hex_colour in (mixed, float32):
        target = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert any(near(c, target) for c in colours), f"no {hex_colour} pixels: a run's line is missing"


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
