"""The editor server on a hostile or broken client stream (turn 8 audit): after a malformed message it
answers the next well-formed requests again. Before, one header without a length, a Content-Length
shorter than its body, or an absurd length left every later header glued to garbage on one line: the
server ran on and never answered again (or waited for bytes that never came, then exited with a
traceback). Raw bytes over pipes, in a fresh process; a ceiling only a hang reaches."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

pytest.importorskip("pygls", reason="the server needs the lsp extra")

CEILING_S = 60
URI = "file:///tmp/mpfix-hostile-lsp/a.py"
HOVER = {"textDocument": {"uri": URI}, "position": {"line": 3, "character": 20}}
TEXT = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"


def _frame(body: bytes, length: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def _message(**fields) -> bytes:
    return _frame(json.dumps({"jsonrpc": "2.0", **fields}).encode())


class _Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "mpfix", "server"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buffer = b""
        self.next_id = 0

    def send(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(self, method: str, params) -> dict | None:
        """The response to a new request, or None when none comes within the ceiling."""
        self.next_id += 1
        self.send(_message(id=self.next_id, method=method, params=params))
        deadline = time.monotonic() + CEILING_S
        while time.monotonic() < deadline:
            while b"\r\n\r\n" in self.buffer:
                head, rest = self.buffer.split(b"\r\n\r\n", 1)
                length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"Content-Length")).split(b":")[1])
                if len(rest) < length:
                    break
                message, self.buffer = json.loads(rest[:length]), rest[length:]
                if message.get("id") == self.next_id and "method" not in message:
                    return message
            if select.select([self.process.stdout], [], [], 0.5)[0]:
                chunk = os.read(self.process.stdout.fileno(), 1 << 20)
                if not chunk:
                    return None
                self.buffer += chunk
        return None

    def hover(self) -> dict | None:
        return self.request("textDocument/hover", HOVER)

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


BROKEN = {
    "a header without a length": b"Content-Type: x\r\n\r\n{}",
    "a length that is not a number": b"Content-Length: abc\r\n\r\n{}",
    "a length shorter than the body": _frame(b'{"jsonrpc": "2.0", "method": "x"}', length=5),
    "a length longer than the body": _frame(b'{"jsonrpc": "2.0", "method": "x"}', length=120),
    "an absurd length": b"Content-Length: 99999999999999\r\n\r\n{}",
    "garbage": b"\x00\xff garbage \r\n\r\n\r\n",
}


@pytest.fixture(scope="module")
def opened():
    """One server for every broken message, in turn (each test still needs an answer after its own):
    a server per message cost ~3 s of start-up each."""
    server = _Server()
    try:
        started = server.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert started is not None and "result" in started
        server.send(_message(method="initialized", params={}))
        server.send(_message(method="textDocument/didOpen", params={"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": TEXT}}))
        assert server.hover() is not None
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_server_answers_again_after_a_malformed_message(opened: _Server, name: str):
    server = opened
    assert server.hover() is not None  # answering before this test's broken message
    server.send(BROKEN[name])
    # The message the broken one overlaps may be lost with it (the stream has no other framing), so
    # it is sent without waiting for its answer (waiting cost the whole ceiling, 60 s, when a length
    # longer than the body swallowed it); the one after must be answered.
    server.next_id += 1
    server.send(_message(id=server.next_id, method="textDocument/hover", params=HOVER))
    answer = server.hover()
    assert answer is not None and "result" in answer, (name, answer)
    assert "MP306" in answer["result"]["contents"]["value"]
    assert server.process.poll() is None


def test_a_request_after_shutdown_gets_an_error_not_silence():
    """LSP: "If a server receives requests after a shutdown request those requests should error with
    InvalidRequest." pygls dropped them: the client's request never got an answer."""
    server = _Server()
    try:
        assert server.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}}) is not None
        server.send(_message(method="initialized", params={}))
        assert server.request("shutdown", None) == {"jsonrpc": "2.0", "id": server.next_id, "result": None}
        answer = server.hover()
        assert answer is not None and answer["error"]["code"] == -32600, answer
        server.send(_message(method="exit"))
        assert server.process.wait(timeout=CEILING_S) == 0
    finally:
        server.close()
