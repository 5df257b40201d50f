"""The guard against a LibCST parse that never ends holds where other threads run (the editor server).

A text CPython rejects is parsed by LibCST only to report it, and LibCST's error recovery can run for
minutes (a long call chain inside a ``def``'s parameters: 4,000 calls ~10 s, about 5x per doubling).
Without threads the parse is tried in a forked child for ``PARSE_PROBE_SECONDS``; a threaded process
cannot fork safely, so before turn 8 it parsed in-process with no bound and the server hung on that
document. The tests run in fresh interpreters with a ceiling only a hang reaches.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

# 32,000 calls: LibCST's recovery would take ~20 minutes on it (measured 1.8 s at 2,000, 9.6 s at 4,000).
# The decorator's argument is a rule's trigger: a file no rule can match is not parsed at all.
RUNAWAY = ("import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(root,\ny = a" + "()" * 32_000
           + "(\n*, cache: bool) -> None:\n    pass\n")
CEILING_S = 150  # only a hang reaches it: the guard ends the parse after PARSE_PROBE_SECONDS

_THREADED = """
import threading, time, libcst as cst
from mpfix import parsing
parsing.PARSE_PROBE_SECONDS = 1.0
release = threading.Event()
threading.Thread(target=release.wait, daemon=True).start()  # as the editor server's threads
"""


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=CEILING_S,
                          env={**os.environ, "MPFIX_TEST_RUNAWAY": RUNAWAY})


def test_a_runaway_parse_ends_where_other_threads_run():
    done = _run(_THREADED + """
import os
text = os.environ["MPFIX_TEST_RUNAWAY"]
for attempt in range(2):  # the second time it is known: no second wait
    try:
        parsing.parse_module(text)
    except parsing.TooComplex as exc:
        print(attempt, exc.line, exc.message)
# the guard's helper was replaced after the overrun: an ordinary rejected text still gets LibCST's own error
try:
    parsing.parse_module("x = [1,\\ndef f(:\\n    pass\\n")
except cst.ParserSyntaxError as exc:
    print("error", exc.raw_line, exc.message.splitlines()[0])
print("parsed", type(parsing.parse_module("x = 1\\n")).__name__)
""")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    for attempt, line in enumerate(lines[:2]):
        assert line.startswith(f"{attempt} 5 SyntaxError: ") and line.endswith(
            "(mpfix's parser did not finish on this file within 1 s)"), line
    assert lines[2].startswith("error 3 ") and lines[3] == "parsed Module"


def test_the_guards_helper_process_survives_being_killed_and_dies_with_its_parent():
    """The bounded parse where threads run uses one helper process, reused across texts. Killed under
    it, it is started again; it never outlives the process that started it."""
    done = _run(_THREADED + """
import os, signal
from mpfix import parse_probe
def error(text):
    try:
        parsing.parse_module(text)
    except cst.ParserSyntaxError as exc:
        return exc.raw_line, exc.raw_column, exc.message
first = error("a = (\\ndef g(:\\n")
helper = parse_probe.helper_pid()
assert helper is not None
second = error("b = (\\ndef g(:\\n")
assert parse_probe.helper_pid() == helper  # reused, not one process per text
os.kill(helper, signal.SIGKILL)
third = error("c = (\\ndef g(:\\n")
assert parse_probe.helper_pid() not in (None, helper)
expected = []
for text in ("a = (\\ndef g(:\\n", "b = (\\ndef g(:\\n", "c = (\\ndef g(:\\n"):
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        expected.append((exc.raw_line, exc.raw_column, exc.message))
assert [first, second, third] == expected, ([first, second, third], expected)
print(parse_probe.helper_pid())
""")
    assert done.returncode == 0, done.stderr
    helper = int(done.stdout.split()[-1])
    # The parent has exited: its helper follows it (stdin closed and PR_SET_PDEATHSIG).
    for _ in range(300):  # a bound (the loop ends once it is gone): a loaded 2-core CI
        if not Path(f"/proc/{helper}").exists() or "Z" in _state(helper):
            break
        import time

        time.sleep(0.1)
    else:
        pytest.fail(f"the helper {helper} outlived its parent")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


pytest.importorskip("pygls", reason="the server needs the lsp extra")
pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types  # noqa: E402


@pytest.mark.asyncio
async def test_the_server_answers_a_runaway_buffer_with_an_mp000_and_goes_on(tmp_path: Path):
    config = pytest_lsp.ClientServerConfig(server_command=[sys.executable, "-m", "mpfix", "server"])
    client = await config.start()
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=pytest_lsp.client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri()))
        for name, text in (("runaway.py", RUNAWAY), ("ok.py", RUNAWAY.replace("()" * 32_000, ""))):
            uri = (tmp_path / name).as_uri()
            client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text)))
            params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS),
                                            timeout=CEILING_S)
            assert params.uri == uri
            assert [d.code for d in params.diagnostics] == ["MP000"], name
            message = params.diagnostics[0].message
            assert message.startswith("SyntaxError") or "error" in message, message
            assert ("did not finish" in message) == (name == "runaway.py"), message
    finally:
        await client.shutdown_session()
        await client.stop()
