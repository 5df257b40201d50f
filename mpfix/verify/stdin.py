"""Parent side: the user's stdin, given to every run of the script.

verify runs the script two or more times (mixed, float32, --locate); each run must read the
same input. A terminal is handed to each child as it is (the user types for each run); a
pipe or a file is read once, in a thread, into a file of verify's temporary folder and
replayed to each child through its own pipe, from the start, following what arrives later
until the end of the input. No stdin at all (closed) gives the child /dev/null.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

CHUNK = 1 << 16


def _stdin_fd() -> int | None:
    try:
        fd = sys.stdin.fileno() if sys.stdin is not None else None
        if fd is not None:
            os.fstat(fd)
        return fd
    except (OSError, ValueError, AttributeError):
        return None


class Stdin:
    """What each child gets as stdin (``for_child``) and the threads that feed it."""

    def __init__(self, folder: Path) -> None:
        self.fd = _stdin_fd()
        self.tty = self.fd is not None and os.isatty(self.fd)
        self.path = folder / "stdin"
        self._cond = threading.Condition()
        self._size = 0
        self._done = False
        if self.fd is not None and not self.tty:
            self.path.write_bytes(b"")
            threading.Thread(target=self._read, name="mpfix-verify-stdin", daemon=True).start()

    def _read(self) -> None:
        with open(self.path, "ab") as out:
            while True:
                try:
                    chunk = os.read(self.fd, CHUNK)
                except OSError:
                    chunk = b""
                if chunk:
                    out.write(chunk)
                    out.flush()
                with self._cond:
                    self._size += len(chunk)
                    self._done = not chunk
                    self._cond.notify_all()
                if not chunk:
                    return

    def for_child(self):
        """The ``stdin=`` argument of one child's ``Popen``."""
        if self.fd is None:
            return subprocess.DEVNULL
        if self.tty:
            return None  # inherited: the terminal itself
        return subprocess.PIPE

    def feed(self, proc: subprocess.Popen) -> None:
        """Replay the input to ``proc.stdin`` (a pipe) in a thread, then close it."""
        if proc.stdin is None:
            return
        threading.Thread(target=self._feed, args=(proc.stdin,), name="mpfix-verify-stdin-feed", daemon=True).start()

    def _feed(self, pipe) -> None:
        offset = 0
        try:
            with open(self.path, "rb") as source:
                while True:
                    with self._cond:
                        while self._size == offset and not self._done:
                            self._cond.wait()
                        size, done = self._size, self._done
                    if size == offset and done:
                        break
                    source.seek(offset)
                    data = source.read(size - offset)
                    pipe.write(data)
                    pipe.flush()
                    offset += len(data)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the child ended (or never reads its input)
        finally:
            try:
                pipe.close()
            except OSError:
                pass
