"""Safe writes of a user's file: inside the project, only over the bytes mpfix read, keeping mode and links.

* The target is the file a symlink points to, only when that lies inside the project
  (``mpfix.safe_read.check_inside``): ``apply`` never writes outside the tree through a link.
* ``expected`` (the bytes the fix was computed from) is compared with the file right before it is
  replaced: a file another program changed meanwhile is skipped (``ChangedError``), not overwritten.
* A file with one name is replaced atomically: a temp file in the same folder, then rename.
  A file with several hard links is written in place, through the same inode, so every name
  sees the fix; its old content is kept in a backup file beside it until the write is done.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from mpfix import safe_read


class ReadOnlyError(PermissionError):
    """The file is read-only: nobody may write it, or we may not."""


class ChangedError(OSError):
    """The file changed since mpfix read it (an editor, a formatter, a second mpfix run)."""

    def __init__(self, path: Path | str) -> None:
        self.message = "file changed since mpfix read it; skipped, nothing was written (run mpfix again)"
        super().__init__(0, self.message)  # strerror: what callers show after "cannot write file: "


def _unchanged(target: str, expected: bytes | None) -> None:
    if expected is None:
        return
    try:
        now = safe_read.read_bytes(target, len(expected) + 1, follow_outside=True)
    except OSError as exc:
        raise ChangedError(target) from exc
    if now != expected:
        raise ChangedError(target)


def write_atomic(path: Path, data: bytes, expected: bytes | None = None) -> None:
    """Replace ``path``'s content with ``data``; on any failure the old file is intact.

    A symlink is written through (its target is replaced) when its target is inside the project,
    so links in the user's tree stay links; ``safe_read.Refused`` otherwise. ``expected``: the
    bytes the new content was computed from; ``ChangedError`` if the file no longer holds them.
    """
    target = Path(safe_read.check_inside(path))
    st = target.stat()
    if not stat.S_ISREG(st.st_mode):
        raise safe_read.not_regular(st.st_mode)
    mode = stat.S_IMODE(st.st_mode)
    # The mode bits as well as access(): root may write anything, but a file
    # that no one may write was made read-only on purpose.
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise ReadOnlyError(f"{path}: file is read-only")
    if st.st_nlink > 1:
        _write_in_place(target, data, expected)
        return
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
        _unchanged(str(target), expected)  # last look before the rename (the window is this call)
        os.replace(tmp, target)
    except BaseException:
        # Also on KeyboardInterrupt: the temp file goes, the original was never touched.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _write_in_place(target: Path, data: bytes, expected: bytes | None) -> None:
    """Write through the inode (hard links keep sharing it); the old bytes stay in a backup until done."""
    old = expected if expected is not None else safe_read.read_bytes(target, 1 << 31, follow_outside=True)
    fd, backup = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".mpfix-backup", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(old)
            handle.flush()
            os.fsync(handle.fileno())
        _unchanged(str(target), expected)
        out = os.open(target, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            try:
                os.ftruncate(out, 0)
                _write_all(out, data)
                os.fsync(out)
            except BaseException:
                # Put the old bytes back; the backup file stays if even that fails.
                os.ftruncate(out, 0)
                _write_all(out, old)
                os.fsync(out)
                raise
        finally:
            os.close(out)
    except BaseException:
        try:
            if safe_read.read_bytes(target, len(old) + 1, follow_outside=True) == old:
                os.unlink(backup)  # the file holds its old bytes: nothing to recover
        except OSError:
            pass  # the backup stays beside the file
        raise
    os.unlink(backup)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
