"""``mpfix server``: the Language Server, driven by a real LSP client over stdio (pytest-lsp)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the server needs the lsp extra (pip install 'mpfix[lsp]')")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402

from mpfix.lsp import Lines  # noqa: E402

# MP306 (safe fix) after a character that takes two UTF-16 code units, so columns must be converted.
DOCUMENT = (
    "import tensorflow as tf\n"
    "\n"
    "\n"
    'def f(x):\n'
    "    return x\n"
    "\n"
    'label = "\U0001f600"; g = tf.function(f, experimental_relax_shapes=True)\n'
)
FINDING_LINE = 6  # 0-based
ARGUMENT = "experimental_relax_shapes"


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP text edits (UTF-16 positions) as an editor would."""
    lines = Lines(text)
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start, end = lines.offset(edit.range.start), lines.offset(edit.range.end)
        text = text[:start] + edit.new_text + text[end:]
        lines = Lines(text)
    return text


def _utf16_column(line: str, index: int) -> int:
    return len(line[:index].encode("utf-16-le")) // 2


@pytest.fixture
def shadowed_tensorflow(tmp_path: Path):
    """A PYTHONPATH on which importing tensorflow (or keras) leaves a mark and fails."""
    shadow = tmp_path / "shadow"
    marks = tmp_path / "imported"
    marks.mkdir()
    for name in ("tensorflow", "keras", "tf_keras"):
        package = shadow / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"open({str(marks / name)!r}, 'w').close()\nraise ImportError('mpfix server imported {name}')\n")
    return shadow, marks


async def _start(env_path: Path | None = None, cwd: Path | None = None):
    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(env_path), env.get("PYTHONPATH", "")) if p)
    config = pytest_lsp.ClientServerConfig(server_command=[sys.executable, "-m", "mpfix", "server"], server_env=env)
    client = await config.start()
    await client.initialize_session(types.InitializeParams(
        capabilities=pytest_lsp.client_capabilities("visual-studio-code"),
        root_uri=cwd.as_uri() if cwd else None))
    return client


async def _published(client, uri: str) -> types.PublishDiagnosticsParams:
    params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout=60)
    assert params.uri == uri
    return params


async def _diagnostics(client, uri: str) -> list[types.Diagnostic]:
    return list((await _published(client, uri)).diagnostics)


@pytest.mark.asyncio
async def test_round_trip_diagnostic_code_action_fix_hover(tmp_path, shadowed_tensorflow):
    shadow, marks = shadowed_tensorflow
    path = tmp_path / "train.py"
    path.write_text(DOCUMENT, encoding="utf-8")
    uri = path.as_uri()
    client = await _start(shadow, tmp_path)
    try:
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=DOCUMENT)))
        diagnostics = await _diagnostics(client, uri)
        assert [d.code for d in diagnostics] == ["MP306"]
        diagnostic = diagnostics[0]
        assert diagnostic.source == "mpfix"
        assert diagnostic.severity == types.DiagnosticSeverity.Warning
        assert diagnostic.code_description.href.endswith("#mp306")
        line = DOCUMENT.splitlines()[FINDING_LINE]
        # The range is the keyword argument, in UTF-16 units (the emoji counts twice).
        assert diagnostic.range.start == types.Position(line=FINDING_LINE,
                                                        character=_utf16_column(line, line.index(ARGUMENT)))

        actions = await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        fixes = [a for a in actions if a.kind == types.CodeActionKind.QuickFix and "[safe fix]" in a.title]
        assert len(fixes) == 1 and fixes[0].is_preferred
        assert fixes[0].title.startswith("mpfix (MP306): ")
        fix_all = [a for a in actions if a.kind == "source.fixAll.mpfix"]
        assert [a.title for a in fix_all] == ["mpfix: Fix all safe fixes in this file"]
        noqa = [a for a in actions if a.title == "mpfix (MP306): disable for this line"]
        assert len(noqa) == 1

        fixed = _apply(DOCUMENT, fixes[0].edit.changes[uri])
        assert "reduce_retracing=True" in fixed and ARGUMENT not in fixed
        assert fixed == _apply(DOCUMENT, fix_all[0].edit.changes[uri])
        assert _apply(DOCUMENT, noqa[0].edit.changes[uri]).splitlines()[FINDING_LINE].endswith("  # noqa: MP306")

        hover = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=diagnostic.range.start))
        assert hover is not None and "relax-shapes (MP306)" in hover.contents.value
        assert "What it does" in hover.contents.value and hover.range == diagnostic.range
        outside = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=0)))
        assert outside is None

        # The editor applies the fix (a full-text change); the diagnostic goes.
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)]))
        assert await _diagnostics(client, uri) == []

        # Typing the old argument back in (an incremental change) brings it back.
        start = fixed.splitlines()[FINDING_LINE].index("reduce_retracing")
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line=FINDING_LINE, character=_utf16_column(line, start)),
                                  types.Position(line=FINDING_LINE,
                                                 character=_utf16_column(line, start + len("reduce_retracing")))),
                text=ARGUMENT)]))
        assert [d.code for d in await _diagnostics(client, uri)] == ["MP306"]

        # A burst of changes is linted once, for the last text.
        for version, text in ((4, fixed), (5, DOCUMENT), (6, fixed)):
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
        published = await _published(client, uri)
        assert (published.version, list(published.diagnostics)) == (6, [])
    finally:
        await client.shutdown_session()
        await client.stop()
    assert not list(marks.iterdir()), "the server imported TensorFlow or Keras"


@pytest.mark.asyncio
async def test_syntax_error_and_project_config(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "pyproject.toml").write_text('[tool.mpfix]\nignore = ["MP306"]\n', encoding="utf-8")
    ignored = tmp_path / "project" / "ignored.py"
    broken = tmp_path / "broken.py"
    client = await _start(cwd=tmp_path)
    try:
        # [tool.mpfix] of the document's project applies: MP306 is ignored there.
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=ignored.as_uri(), language_id="python", version=1, text=DOCUMENT)))
        assert await _diagnostics(client, ignored.as_uri()) == []
        # A document that does not parse gives an MP000 error, and the server keeps serving.
        text = DOCUMENT + "def broken(:\n"
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=broken.as_uri(), language_id="python", version=1, text=text)))
        diagnostics = await _diagnostics(client, broken.as_uri())
        assert [d.code for d in diagnostics] == ["MP000"]
        assert diagnostics[0].severity == types.DiagnosticSeverity.Error
        assert "SyntaxError" in diagnostics[0].message
        actions = await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=broken.as_uri()), range=diagnostics[0].range,
            context=types.CodeActionContext(diagnostics=diagnostics)))
        assert not actions
        hover = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=broken.as_uri()), position=diagnostics[0].range.start))
        assert hover is None
        # An unsafe fix is offered, labelled as such, never preferred and not part of "fix all safe fixes".
        sample = Path(__file__).resolve().parents[1] / "samples" / "attention_mask_1e9.py"
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=sample.as_uri(), language_id="python", version=1, text=sample.read_text(encoding="utf-8"))))
        diagnostics = await _diagnostics(client, sample.as_uri())
        assert [d.code for d in diagnostics] == ["MP201"]
        actions = await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=sample.as_uri()), range=diagnostics[0].range,
            context=types.CodeActionContext(diagnostics=diagnostics)))
        fixes = [a for a in actions if a.title.endswith("[unsafe fix: may change behaviour]")]
        assert len(fixes) == 1 and not fixes[0].is_preferred and fixes[0].kind == types.CodeActionKind.QuickFix
        assert not [a for a in actions if a.kind == "source.fixAll.mpfix"]
        # A [tool.mpfix] that cannot be used is said where the user looks, not ignored.
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "pyproject.toml").write_text('[tool.mpfix]\nkeras = 5\n', encoding="utf-8")
        bad = (tmp_path / "bad" / "train.py").as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=bad, language_id="python", version=1, text=DOCUMENT)))
        diagnostics = await _diagnostics(client, bad)
        assert [d.code for d in diagnostics] == ["MP000"] and "keras must be 2, 3" in diagnostics[0].message
        # Closing clears its diagnostics.
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=broken.as_uri())))
        assert await _diagnostics(client, broken.as_uri()) == []
    finally:
        await client.shutdown_session()
        await client.stop()


def test_lines_convert_utf16_and_newlines():
    text = "a\r\nb\U0001f600c\rd\x0ce\n"
    lines = Lines(text)
    assert len(lines.starts) == 4  # \r\n, \r and \n end lines; a form feed does not
    assert lines.position(2, 3) == types.Position(line=1, character=3)  # after the emoji: 1 + 2 units
    assert lines.offset(types.Position(line=1, character=3)) == text.index("c")
    assert lines.at_offset(text.index("e")) == types.Position(line=2, character=2)
    assert lines.offset(types.Position(line=9, character=0)) == len(text)


def test_server_without_pygls_says_how_to_install(tmp_path):
    import subprocess

    shadow = tmp_path / "shadow" / "pygls"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no pygls', name='pygls')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}
    done = subprocess.run([sys.executable, "-m", "mpfix", "server"], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2
    assert "pip install 'mpfix[lsp]'" in done.stderr


@pytest.mark.parametrize(("safety", "label"), [
    ("SAFE", "[safe fix]"), ("UNSAFE", "[unsafe fix: may change behaviour]"),
    ("DISPLAY_ONLY", "[display-only fix: only `mpfix repair` can prove it]")])
def test_a_quick_fix_title_names_its_applicability(safety: str, label: str):
    from mpfix.findings import Finding, Fix, FixSafety, Position
    from mpfix.lsp import fix_title

    fix = Fix(changes={}, safety=FixSafety[safety], description="Use reduce_retracing")
    finding = Finding("MP306", "m", "a.py", Position(1, 1), Position(1, 2), fix=fix)
    assert fix_title(finding) == f"mpfix (MP306): Use reduce_retracing {label}"


def test_the_server_keeps_what_the_project_scan_read_of_unchanged_files_between_saves():
    """Every save forgets the project facts (``did_save``) and the server has no cache folder: the per-file records
    of the project scan stay in its memory, so a save re-reads the saved file only
    (tests/test_project_store_incremental.py checks such records give a scan's exact facts)."""
    from mpfix.lsp import create_server
    from mpfix.project import file_records, store

    kept = store.folder()
    store.use(None)
    file_records.keep_in_memory(False)
    try:
        assert file_records.folder() is None
        create_server()
        assert file_records.folder() is file_records.MEMORY
    finally:
        file_records.keep_in_memory(False)
        store.use(kept)
