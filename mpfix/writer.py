"""Atomic writes that keep the file's mode: a temp file in the same folder, then rename."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data``; on any failure the old file is intact.

    A symlink is written through (its target is replaced), so links in the
    user's tree stay links.
    """
    target = Path(os.path.realpath(path))
    mode = stat.S_IMODE(target.stat().st_mode)
    if not os.access(target, os.W_OK):
        raise PermissionError(f"{path}: file is read-only; nothing was written")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".mpfix-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        # Also on KeyboardInterrupt: the temp file goes, the original was never touched.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
