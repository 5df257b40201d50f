"""A one-line progress display on stderr for long runs (a plain ``\\r`` line, no dependency)."""

from __future__ import annotations

import sys
import time

# Below this many files a run takes about a second: a bar would only flicker.
MIN_FILES = 20
_INTERVAL = 0.1  # seconds between redraws


class Progress:
    """``update()`` once per finished file; ``close()`` erases the line."""

    def __init__(self, total: int, enabled: bool, stream=None) -> None:
        self.total = total
        self.enabled = enabled and total > MIN_FILES
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self._last = 0.0
        self._width = 0

    def update(self, count: int = 1) -> None:
        self.done += count
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < _INTERVAL and self.done < self.total:
            return
        self._last = now
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        filled = int(30 * self.done / self.total) if self.total else 30
        line = f"mpfix [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} files"
        self._width = max(self._width, len(line))
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> "Progress":
        self._draw()  # from the start: a run that shows nothing for seconds looks hung
        return self

    def __exit__(self, *exc) -> None:
        self.close()
