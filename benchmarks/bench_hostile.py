"""Issue 21's bounds, measured (a script, not a test: timings on a shared machine are noise).

* ``json-vs-text``: ``mpfix check --format json`` against the text format on N copies of
  ``samples/tf24_era_training.py`` (target: json <= 1.5x text). JSON computes each fix's own
  edits; before ``mpfix.fix_edits`` each fix was applied and validated alone (quadratic).
* ``fixes-scaling``: one file holding K fixable findings, json time for K = 21, 42, 84, 168
  (issue 21 measured 1.8 / 3.6 / 9.3 / 33.5 s; linear means the ratio per doubling stays ~2).
* ``server``: seconds from ``didOpen`` of a 2 MB buffer to its first ``publishDiagnostics``
  (target: <= 5 s), through a real LSP client (pytest-lsp) and ``mpfix server``.

    python benchmarks/bench_hostile.py [--copies 24] [--repeat 3] [--skip-server]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tf24_era_training.py"
FINDING = "@tf.function(experimental_relax_shapes=True)\ndef step_{i}(x):\n    return x\n\n\n"


def _timed(args: list[str], cwd: Path, repeat: int) -> float:
    env = dict(os.environ, NO_COLOR="1")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "mpfix", *args], cwd=cwd, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def json_vs_text(copies: int, repeat: int, jobs: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
        for i in range(copies):
            shutil.copy(SAMPLE, root / f"copy_{i}.py")
        extra = ["--jobs", jobs] if jobs else []
        text = _timed(["check", "--no-cache", *extra, "--format", "text", "."], root, repeat)
        json = _timed(["check", "--no-cache", *extra, "--format", "json", "."], root, repeat)
        full = _timed(["check", "--no-cache", *extra, "--format", "full", "."], root, repeat)
    print(f"json-vs-text ({copies} copies of {SAMPLE.name}, --jobs {jobs or 'default'}, median of {repeat}): text {text:.2f} s, "
          f"json {json:.2f} s ({json / text:.2f}x), full {full:.2f} s ({full / text:.2f}x); target json <= 1.5x")


def fixes_scaling(repeat: int) -> None:
    rows = []
    for count in (21, 42, 84, 168):
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            (root / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
            (root / "many.py").write_text("import tensorflow as tf\n\n\n" + "".join(FINDING.format(i=i) for i in range(count)))
            text = _timed(["check", "--no-cache", "--format", "text", "many.py"], root, repeat)
            json = _timed(["check", "--no-cache", "--format", "json", "many.py"], root, repeat)
            rows.append((count, text, json))
    print("fixes-scaling (one file, K fixable findings): " + "; ".join(
        f"K={k}: text {t:.2f} s, json {j:.2f} s" for k, t, j in rows))


async def _server_first_diagnostics(size: int) -> float:
    import pytest_lsp
    from lsprotocol import types

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.py"
        text = "import tensorflow as tf\n" + "x = tf.reduce_sum(y)\n" * (size // 21)
        config = pytest_lsp.ClientServerConfig(server_command=[sys.executable, "-m", "mpfix", "server"])
        client = await config.start()
        try:
            await client.initialize_session(types.InitializeParams(
                capabilities=pytest_lsp.client_capabilities("visual-studio-code"), root_uri=Path(folder).as_uri()))
            started = time.perf_counter()
            client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
                uri=path.as_uri(), language_id="python", version=1, text=text)))
            await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout=600)
            return time.perf_counter() - started
        finally:
            await client.shutdown_session()
            await client.stop()


def rejected_with_threads(count: int) -> None:
    """Where threads run (the editor server), a text CPython rejects is parsed by LibCST in the reused
    helper process, bounded by PARSE_PROBE_SECONDS; before turn 8, in-process with no bound. Each text is
    a real file with one syntax error at a different line, as an editor sends mid-edit."""
    import threading

    import libcst as cst

    from mpfix import parse_probe, parsing

    source = (ROOT / "samples" / "tf24_era_training.py").read_text(encoding="utf-8").splitlines(keepends=True)
    source = source * max(1, 400 // len(source))  # about 400 lines, a sizeable module
    texts = []
    for i in range(count):
        lines = list(source)
        lines.insert(1 + i * (len(lines) - 2) // count, f"broken_{i} = foo(\n")
        texts.append("".join(lines))
    release = threading.Event()
    threading.Thread(target=release.wait, daemon=True).start()
    try:
        started = time.perf_counter()
        parse_probe.warm()
        parse_probe.probe("x = (\n", 60)  # waits for the helper's start
        start_cost = time.perf_counter() - started
        inside, helper = [], []
        probe = parsing._libcst_probe
        for text in texts:
            for way, times in ((lambda text, seconds: None, inside), (probe, helper)):
                parsing._libcst_probe = way  # None: nothing known, LibCST parses in-process (turn 7)
                parsing._PROBED.clear()
                began = time.perf_counter()
                try:
                    parsing.parse_module(text)
                except cst.ParserSyntaxError:
                    pass
                times.append(time.perf_counter() - began)
    finally:
        parsing._libcst_probe = probe
        release.set()
    a, b = statistics.median(inside), statistics.median(helper)
    print(f"rejected text with threads ({count} texts of {len(source)} lines): in-process LibCST {a * 1e3:.0f} ms, "
          f"through the helper {b * 1e3:.0f} ms ({b / a:.2f}x), helper start once {start_cost:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--only-rejected", action="store_true", help="only the rejected-text-with-threads measure")
    options = parser.parse_args()
    rejected_with_threads(20)
    if options.only_rejected:
        return
    json_vs_text(options.copies, options.repeat)
    json_vs_text(options.copies, options.repeat, "1")
    if not options.skip_scaling:
        fixes_scaling(options.repeat)
    if not options.skip_server:
        seconds = asyncio.run(_server_first_diagnostics(2_000_000))
        print(f"server: first diagnostics of a 2 MB buffer after {seconds:.2f} s; target <= 5 s")


if __name__ == "__main__":
    main()
