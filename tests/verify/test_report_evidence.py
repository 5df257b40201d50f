"""The HTML report plots what its verdict rests on; HTML and JSON say what produced them (issue 20)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mpfix import __version__
from mpfix.verify import report_html, report_json
from mpfix.verify.records import RunResult, Step
from mpfix.verify.run import Options, Report
from mpfix.verify.verdict import judge


def _run(mode: str, zero: float, act: float | None, steps: int = 20) -> RunResult:
    return RunResult(mode, end={"event": "end", "status": "finished"}, returncode=0, steps=[
        Step(i, 1.0 - 0.01 * i, 1.0, False, False, 0.0, zero, 1.0, act_max=None if act is None else act * (1 + i),
             act_layer=None if act is None else 0)
        for i in range(steps)
    ])


def _report(mixed: RunResult, baseline: RunResult, tmp_path: Path) -> Report:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    return Report(script, [], Options(), mixed, baseline, judge(mixed, baseline, script))


def _plot_titles(page: str) -> list[str]:
    return re.findall(r'<svg[^>]*aria-label="([^"]+)"', page)


def test_underflow_report_plots_the_zero_gradient_share_of_both_runs(tmp_path):
    report = _report(_run("mixed", 0.95, None), _run("float32", 0.0, None), tmp_path)
    assert report.verdict.name == "underflow"
    page = report_html.render(report)
    titles = _plot_titles(page)
    assert "Exactly-zero gradient entries per step (%)" in titles
    svg = page.split('aria-label="Exactly-zero gradient entries per step (%)"', 1)[1].split("</svg>", 1)[0]
    assert "series-mixed" in svg and "series-float32" in svg and "underflow threshold 50%" in svg
    # A healthy run has no such plot.
    healthy = _report(_run("mixed", 0.0, None), _run("float32", 0.0, None), tmp_path)
    assert "Exactly-zero gradient entries per step (%)" not in _plot_titles(report_html.render(healthy))


def test_at_risk_report_plots_float16_headroom_against_its_threshold(tmp_path):
    mixed = _run("mixed", 0.0, 600.0)  # 600 * 20 = 12000 > 8188 at the last steps
    mixed.layers[0] = {"name": "dense", "class": "Dense", "file": str(tmp_path / "train.py"), "line": 1}
    report = _report(mixed, _run("float32", 0.0, None), tmp_path)
    assert report.verdict.name == "at-risk"
    page = report_html.render(report)
    assert "Largest float16 output |value| per step (headroom)" in _plot_titles(page)
    svg = page.split('aria-label="Largest float16 output |value| per step (headroom)"', 1)[1].split("</svg>", 1)[0]
    assert "at-risk 8188" in svg and "float16 max 65504" in svg
    # A healthy run's report keeps its two plots (loss, loss scale).
    calm = _run("mixed", 0.0, 10.0)
    healthy = _report(calm, _run("float32", 0.0, None), tmp_path)
    assert healthy.verdict.name == "healthy" and len(_plot_titles(report_html.render(healthy))) == 2


def test_html_and_json_reports_say_which_mpfix_when_and_how(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["mpfix", "verify", "train.py", "--steps", "20"])
    report = _report(_run("mixed", 0.0, None), _run("float32", 0.0, None), tmp_path)
    page = report_html.render(report)
    assert f"mpfix {__version__}" in page and "mpfix verify train.py --steps 20" in page
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", page)
    out = tmp_path / "r.json"
    report_json.write(report, out)
    data = json.loads(out.read_text())
    assert data["mpfix_version"] == __version__ and data["command"] == "mpfix verify train.py --steps 20"
    assert re.match(r"\d{4}-\d\d-\d\dT", data["date"])
    assert data["findings"] == []


def test_html_lists_the_runtime_findings(tmp_path):
    mixed = _run("mixed", 0.0, None)
    mixed.ops = [{"trace": 0, "order": 0, "type": "Exp", "name": "Exp", "file": str(tmp_path / "train.py"), "line": 1,
                  "peak": 0.0, "peak_step": -1, "first_bad": 3, "born": True}]
    report = _report(mixed, _run("float32", 0.0, None), tmp_path)
    page = report_html.render(report)
    assert '<pre class="findings">train.py:1:1: MP204 float16 `Exp` gave inf/NaN from finite inputs at step 3</pre>' \
           in page
