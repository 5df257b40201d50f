"""Turn 14 fuzz round: editor buffers the CLI can never read. An LSP client sends JSON, and JSON may escape
half of a UTF-16 pair ("\\ud800"); a file on disk cannot hold one (strict UTF-8), a notebook cell is refused
with a clear error (``mpfix.notebooks``). Before, a buffer holding one was an "internal error ... please
report it" diagnostic (the reach scan encoded the text)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from mpfix import api

BUFFER = (
    "import tensorflow as tf\n"
    "from tensorflow import keras\n"
    "\n"
    "keras.mixed_precision.set_global_policy('mixed_float16')\n"
    "label = '\ud800'\n"
    "model = keras.Sequential([keras.layers.Dense(10), keras.layers.Activation('softmax')])\n"
)


def test_a_lone_surrogate_in_a_buffer_is_a_clear_error_at_its_place(tmp_path: Path):
    result = api.lint_text(BUFFER, tmp_path / "a.py")
    assert result.findings == []
    [error] = result.errors
    assert (error.line, error.column) == (5, 10)
    assert "lone surrogate (\\ud800)" in error.message
    assert "internal error" not in error.message


def test_fixing_a_buffer_with_a_lone_surrogate_writes_nothing(tmp_path: Path):
    result = api.lint_text(BUFFER, tmp_path / "a.py", fix=True, unsafe_fixes=True)
    assert result.fixed_text is None
    assert [e.line for e in result.errors] == [5]


pytest.importorskip("pygls", reason="the server needs the lsp extra (pip install 'mpfix[lsp]')")
pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types  # noqa: E402


@pytest.mark.asyncio
async def test_a_change_to_a_document_never_opened_pops_up_no_error(tmp_path: Path):
    """A client that sends didChange before didOpen (or after didClose), of a text document or a notebook,
    broke the protocol; before, the editor showed the user "Error in server: KeyError: 'file:///...'"
    (pygls' workspace lookup)."""
    config = pytest_lsp.ClientServerConfig(server_command=[sys.executable, "-m", "mpfix", "server"])
    client = await config.start()
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=pytest_lsp.client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri()))
        uri = (tmp_path / "never_opened.py").as_uri()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="x = 1\n")]))
        client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=(tmp_path / "n.ipynb").as_uri()),
            change=types.NotebookDocumentChangeEvent()))
        opened = (tmp_path / "a.py").as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=opened, language_id="python", version=1, text=BUFFER)))
        published = await asyncio.wait_for(
            client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout=120)
        assert published.uri == opened  # the server went on
        assert [m.message for m in client.messages if m.type == types.MessageType.Error] == []
    finally:
        await client.shutdown_session()


@pytest.mark.asyncio
async def test_a_document_whose_uri_is_percent_encoded_is_linted(tmp_path: Path):
    """Editors percent-encode a path's spaces and non-ASCII letters (``my%20project/caf%C3%A9.py``); pygls keeps
    documents under the decoded URI. Before, the server looked the encoded one up, found nothing, and such a
    document got no diagnostics, no code actions and no changes."""
    config = pytest_lsp.ClientServerConfig(server_command=[sys.executable, "-m", "mpfix", "server"])
    client = await config.start()
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=pytest_lsp.client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri()))
        uri = (tmp_path / "my project" / "café.py").as_uri()
        assert "%20" in uri and "%C3%A9" in uri
        source = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=source)))
        published = await asyncio.wait_for(
            client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout=120)
        assert [d.code for d in published.diagnostics] == ["MP306"]
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="import tensorflow as tf\n")]))
        published = await asyncio.wait_for(
            client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), timeout=120)
        assert (published.version, list(published.diagnostics)) == (2, [])
    finally:
        await client.shutdown_session()
