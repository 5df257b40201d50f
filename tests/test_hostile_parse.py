"""Input that crashed or stalled LibCST's native parser (issue 21 item 2): refused before the parse,
as an MP000 for that file; the other files are still checked, and the editor server survives."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix.parsing import MAX_DEPTH, TooComplex, check_depth, parse_module

# Each of these killed `mpfix check` with SIGSEGV (rc 139) before the pre-check.
PATHOLOGICAL = {
    "parens.py": "x = " + "(" * 3000 + "1" + ")" * 3000 + "\n",
    "attributes.py": "import tensorflow as tf\nx = a" + ".b" * 8000 + "\n",
    "additions.py": "x = " + " + ".join(["1"] * 8000) + "\n",
    "calls.py": "x = f" + "()" * 3000 + "\n",  # not a crash: LibCST took over two minutes
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_the_pre_check_refuses_what_libcst_cannot_parse(name: str):
    started = time.monotonic()
    with pytest.raises(TooComplex):
        parse_module(PATHOLOGICAL[name])
    assert time.monotonic() - started < 5


def test_ordinary_nesting_still_parses():
    text = "x = a" + ".b" * 300 + "\ny = " + "(" * 150 + "1" + ")" * 150 + "\n"
    assert parse_module(text).code == text
    check_depth("def broken(:\n")  # other syntax errors are the engine's to report, with CPython's place


def test_the_pre_check_keeps_the_recursion_limit():
    before = sys.getrecursionlimit()
    with pytest.raises(TooComplex, match=f"about {MAX_DEPTH} levels"):
        check_depth(PATHOLOGICAL["additions.py"])
    assert sys.getrecursionlimit() == before


def test_with_another_thread_running_the_pre_check_never_lowers_the_recursion_limit(monkeypatch):
    # The limit is one per process: lowered here, it made a TensorFlow import in the main thread raise
    # RecursionError while a linting thread measured a file (the whole test suite, 2026-12-02).
    import threading

    calls, before = [], sys.getrecursionlimit()
    real = sys.setrecursionlimit
    monkeypatch.setattr(sys, "setrecursionlimit", lambda n: (calls.append(n), real(n)))
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        for name, text in PATHOLOGICAL.items():
            with pytest.raises(TooComplex):
                check_depth(text)
        check_depth("x = a" + ".b" * 300 + "\ny = " + "(" * 150 + "1" + ")" * 150 + "\n")  # ordinary: passes
        check_depth("def broken(:\n")
        with pytest.raises(TooComplex):  # the same limit as without threads, within a few levels
            check_depth("x = " + "a + " * (MAX_DEPTH + 10) + "a\n")
        check_depth("x = " + "a + " * (MAX_DEPTH - 10) + "a\n")
    finally:
        release.set()
        other.join()
    assert calls == []
    assert sys.getrecursionlimit() == before


def test_a_pathological_file_is_an_mp000_and_the_run_goes_on(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for name, text in PATHOLOGICAL.items():
        # A trigger, so the prefilter does not skip the file without parsing it.
        (tmp_path / name).write_text(DEPRECATED + text)
    (tmp_path / "ok.py").write_text(DEPRECATED)
    env = dict(os.environ, MPFIX_CACHE_DIR=str(tmp_path / ".cache"), NO_COLOR="1")
    for command in (["check"], ["check", "--format", "json"], ["apply"]):
        result = subprocess.run([sys.executable, "-m", "mpfix", *command, "."], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        output = result.stdout + result.stderr
        assert result.returncode == 2, (command, output)  # not 139 (SIGSEGV)
        assert "Traceback" not in output
        for name in PATHOLOGICAL:
            assert name in output, (name, output)
        if command == ["check"]:
            assert "parens.py:10:205: MP000 SyntaxError: too many nested parentheses" in output
            assert "calls.py:1:1: MP000 an expression is nested or chained more than about 1000 levels" in output
        if command == ["apply"]:
            assert (tmp_path / "ok.py").read_text() == DEPRECATED_FIXED  # the run went on
        else:
            assert "ok.py" in output and "MP306" in output
    assert (tmp_path / "parens.py").read_text() == DEPRECATED + PATHOLOGICAL["parens.py"]


pytest.importorskip("pygls", reason="the server needs the lsp extra")
pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types  # noqa: E402


async def _start(cwd: Path):
    config = pytest_lsp.ClientServerConfig(server_command=[sys.executable, "-m", "mpfix", "server"])
    client = await config.start()
    await client.initialize_session(types.InitializeParams(
        capabilities=pytest_lsp.client_capabilities("visual-studio-code"), root_uri=cwd.as_uri()))
    return client


async def _diagnostics(client, uri: str) -> list[types.Diagnostic]:
    params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout=60)
    assert params.uri == uri
    return list(params.diagnostics)


@pytest.mark.asyncio
async def test_the_server_survives_any_buffer_and_unknown_documents(tmp_path: Path):
    client = await _start(tmp_path)
    try:
        for name, text in PATHOLOGICAL.items():
            uri = (tmp_path / name).as_uri()
            client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=DEPRECATED + text)))
            diagnostics = await _diagnostics(client, uri)
            assert [d.code for d in diagnostics] == ["MP000"], name
        # A 2 MB buffer: one MP000 saying so, at once, instead of minutes of parsing.
        big = (tmp_path / "big.py").as_uri()
        started = time.monotonic()
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=big, language_id="python", version=1, text=DEPRECATED * (2_000_000 // len(DEPRECATED)))))
        diagnostics = await _diagnostics(client, big)
        assert time.monotonic() - started < 60  # the bound itself is measured in benchmarks/
        assert [d.code for d in diagnostics] == ["MP000"] and "MB" in diagnostics[0].message
        # Hover and code actions on a document the client never opened: nothing, not an error. The
        # URI is a FIFO: reading it from disk (pygls' fallback) would block the server forever.
        os.mkfifo(tmp_path / "never_opened.py")
        unknown = (tmp_path / "never_opened.py").as_uri()
        place = types.Range(types.Position(0, 0), types.Position(0, 1))
        hover = await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=unknown), position=place.start)), timeout=30)
        assert hover is None
        actions = await asyncio.wait_for(client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=unknown), range=place,
            context=types.CodeActionContext(diagnostics=[]))), timeout=30)
        assert not actions
        # Still serving.
        ok = (tmp_path / "ok.py").as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=ok, language_id="python", version=1, text=DEPRECATED)))
        assert [d.code for d in await _diagnostics(client, ok)] == ["MP306", "MP307"]
    finally:
        await client.shutdown_session()
        await client.stop()
