"""The editor server's message stream: realigned after a malformed message; answered after shutdown.

pygls reads a header line, and only a line that is exactly ``Content-Length: N`` starts a message.
One broken message (a header without a length, a length shorter than its body, garbage) leaves the
next header glued to the end of the previous body on one line, so no header matched again: the
server stayed up but never answered another request (turn 8 audit). A length far beyond any real
message (``Content-Length: 99999999999999``) made it wait for bytes that never come, then exit with
a traceback. ``Realigned`` wraps stdin for pygls: a header line with text before ``Content-Length:``
is read from the header on, and an absurd length is dropped (the bytes after it are then skipped
up to the next header). At most the broken message and the one it overlaps are lost.

A request after ``shutdown`` gets the InvalidRequest error the LSP specification asks for
(``AfterShutdown``): pygls dropped it, so a client waiting for its answer waited forever. A change to
a document or notebook the client never opened (or closed) is ignored: pygls' workspace raised KeyError, shown to
the user as "Error in server: KeyError: 'file:///...'" (turn 14 fuzz).
"""

from __future__ import annotations

import logging
import re
from typing import BinaryIO
from urllib.parse import unquote

from pygls.exceptions import JsonRpcInvalidRequest
from lsprotocol import types
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import RPCRequest

HEADER = b"Content-Length:"
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a 30 MB didOpen is served; a buffer over 256 KB is not linted anyway
_LENGTH = re.compile(rb"Content-Length: *(\d+)\r\n")

logger = logging.getLogger(__name__)


class Realigned:
    """``readline``/``read`` over ``raw`` (the two calls pygls' stdin reader makes)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def readline(self) -> bytes:
        line = self.raw.readline()
        start = line.find(HEADER)
        if start > 0:
            logger.warning("mpfix server: skipped %d bytes of a malformed message", start)
            line = line[start:]
        match = _LENGTH.fullmatch(line)
        if match is None:
            return line
        length = int(match.group(1))
        if length > MAX_MESSAGE_BYTES:
            logger.warning("mpfix server: ignored a message announced as %d bytes", length)
            return b"X-Mpfix-Ignored: too long\r\n"
        return b"Content-Length: %d\r\n" % length  # the one spelling pygls matches

    def read(self, size: int = -1) -> bytes:
        return self.raw.read(size)


def is_open(workspace, uri: str) -> bool:
    """Whether the client opened ``uri``: pygls keeps documents under the percent-decoded URI, and editors
    encode a path's spaces and non-ASCII letters (``my%20project/caf%C3%A9.py``)."""
    return unquote(uri) in workspace.text_documents


class AfterShutdown(LanguageServerProtocol):
    def handle_message(self, message) -> None:
        if self._shutdown and isinstance(message, RPCRequest) and message.method != "exit":
            error = JsonRpcInvalidRequest(message="the mpfix server was shut down; it answers no more requests")
            self._send_response(message.id, error=error.to_response_error())
            return
        super().handle_message(message)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        if not is_open(self.workspace, params.text_document.uri):
            logger.warning("mpfix server: ignored a change to %s, which is not open", params.text_document.uri)
            return
        yield from super().lsp_text_document__did_change(params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: types.DidChangeNotebookDocumentParams):
        if self.workspace.get_notebook_document(notebook_uri=params.notebook_document.uri) is None:
            logger.warning("mpfix server: ignored a change to %s, which is not open", params.notebook_document.uri)
            return
        yield from super().lsp_notebook_document__did_change(params)
