"""Atomic writes that keep the file's mode: a temp file in the same folder, then rename."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class ReadOnlyError(PermissionError):
    """The file is read-only: nobody may write it, or we may not."""


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data``; on any failure the old file is intact.

    A symlink is written through (its target is replaced), so links in the
    user's tree stay links.
    """
    target = Path(os.path.realpath(path))
    st = target.stat()
    mode = stat.S_IMODE(st.st_mode)
    # The mode bits as well as access(): root may write anything, but a file
    # that no one may write was made read-only on purpose.
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise ReadOnlyError(f"{path}: file is read-only")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".mpfix-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
            # Run as root (a CI container) on a user's file: keep its owner.
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass
        os.replace(tmp, target)
    except BaseException:
        # Also on KeyboardInterrupt: the temp file goes, the original was never touched.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
