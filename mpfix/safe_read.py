"""Reading and writing files of a project that may be hostile: regular files only, bounded, inside the tree.

A repository mpfix checks may come from a stranger (CI on a pull request). Every place that reads
one of its files goes through :func:`read_bytes`, and every place that writes one asks
:func:`check_inside` first:

* regular files only: the file is opened with ``O_NONBLOCK`` and checked with ``fstat`` on the
  open descriptor, so a FIFO never blocks the open or the read, and a device (``/dev/zero``,
  ``/dev/random``) or a socket is refused before a byte is read;
* a size limit: at most ``limit`` bytes are read, even from a file that grows meanwhile;
* symlinks are followed only to targets inside the project (the nearest folder above the link
  with ``pyproject.toml``, ``.git`` or a packaging ``setup.py``; else the working directory when
  the link is inside it; else the link's own folder). A link out of the tree is not followed.

Refusals raise :class:`Refused`, an ``OSError``, so a caller that already skips unreadable files
skips these too; ``Refused.message`` says why in words a user can act on.
"""

from __future__ import annotations

import enum
import errno
import functools
import os
import stat

# [tool.mpfix] max-file-size's default, the one spelling of it. LibCST holds ~0.4-1.5 GB per MB of
# source (a realistic 1.9 MB file: 0.69 GB peak; 200,000 short lines in 1.2 MB: 1.8 GB, 2026-12-02),
# so 10 MB could need 15 GB; no file of TF/Keras/tf-models or site-packages' ML code is over 1 MB.
DEFAULT_LIMIT = 2 * 1024 * 1024
# A notebook's bytes are mostly its outputs (plots as base64): it may be this large whatever the
# setting says (the old default; its code cells are what LibCST parses).
NOTEBOOK_LIMIT = 10 * 1024 * 1024


class Reason(str, enum.Enum):
    NOT_REGULAR = "not-regular"
    TOO_LARGE = "too-large"
    OUTSIDE = "outside"


class Refused(OSError):
    """A file mpfix will not read or write (not an error of the operating system)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(errno.EPERM, message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return self.message


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def not_regular(mode: int) -> Refused:
    if stat.S_ISDIR(mode):
        return Refused(Reason.NOT_REGULAR, "cannot read file: a folder")
    return Refused(Reason.NOT_REGULAR, f"cannot read file: not a regular file ({_kind(mode)}), skipped")


def too_large(size: int | None, limit: int) -> Refused:
    shown = f"{size / 1e6:.1f} MB > " if size is not None else "> "
    return Refused(Reason.TOO_LARGE, f"file is too large ({shown}{limit / 1e6:.1f} MB); "
                                     "raise [tool.mpfix] max-file-size to check it")


# A folder with one of these starts a project (as in ``mpfix.project``, which reads setup.py's text
# to tell a packaging script from a module named setup.py; here any setup.py counts, so the tree a
# link may point into is never larger, and this module imports nothing of mpfix).
_MARKERS = ("pyproject.toml", ".git", "setup.py")


@functools.lru_cache(maxsize=4096)
def _root_for_folder(folder: str, cwd: str) -> str:
    current = folder
    while True:
        if any(os.path.lexists(os.path.join(current, marker)) for marker in _MARKERS):
            root = current
            break
        parent = os.path.dirname(current)
        if parent == current:
            root = cwd if _within(folder, cwd) else folder
            break
        current = parent
    return os.path.realpath(root)


def project_root(path: str | os.PathLike) -> str:
    """The real path of the project holding ``path``, found from the link's own (unresolved) folder."""
    return _root_for_folder(os.path.dirname(os.path.abspath(path)), os.getcwd())


def _within(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


# Linux: the kernel names the file an ``O_PATH`` descriptor holds (``/proc/self/fd``), the path every open follows.
_O_PATH = getattr(os, "O_PATH", 0)
_PROC_FD = os.path.isdir("/proc/self/fd") and bool(_O_PATH)


def _kernel_realpath(path: str | os.PathLike) -> str | None:
    """The real path of an existing ``path`` as the kernel resolved it: one open of an ``O_PATH`` descriptor (no
    read, no side effect: a FIFO or a device is not opened) where ``os.path.realpath`` costs an lstat and Python's
    bookkeeping per component (3,400 paths per tf-models project scan). None where it cannot say (not Linux, a
    missing path, a loop, a path the kernel names oddly): ``check_inside`` then asks ``os.path.realpath``, and it
    trusts this answer only where it equals the absolute path (no link on the way), where both agree."""
    if not _PROC_FD:
        return None
    try:
        name = os.fspath(path)
        if not isinstance(name, str):
            return None
        fd = os.open(name, _O_PATH | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError, TypeError):
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)


def check_inside(path: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """The real path of ``path``; Refused when a symlink on the way leads outside ``root``.

    ``root`` defaults to the project holding ``path`` (see the module docstring).
    """
    absolute = os.path.abspath(path)
    if _kernel_realpath(path) == absolute:
        return absolute  # no symlink on the way: nothing to follow
    real = os.path.realpath(path)
    if real == absolute:
        return real
    base = os.path.realpath(root) if root is not None else project_root(path)
    if not _within(real, base):
        raise Refused(Reason.OUTSIDE, f"symbolic link to {real} outside the project ({base}): not followed")
    return real


def read_bytes(path: str | os.PathLike, limit: int = DEFAULT_LIMIT, root: str | os.PathLike | None = None,
               *, follow_outside: bool = False) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``, a notebook at least
    ``NOTEBOOK_LIMIT``); Refused or OSError otherwise.

    ``follow_outside``: skip the symlink check (a file the user named outside any project,
    such as ``$MPFIX_CACHE_DIR``).
    """
    if not follow_outside:
        # A missing file is the common case of a probe (``setup.py`` in each folder up to the project
        # root): one lstat says so. ``check_inside``'s realpath costs an lstat per path component, and
        # a tree 1,500 folders deep made those probes quadratic: 1.1 million lstats, 85 s (turn 8).
        os.lstat(path)
        check_inside(path, root)
    if os.fspath(path).endswith(".ipynb"):
        limit = max(limit, NOTEBOOK_LIMIT)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # opening a socket file
            raise not_regular(stat.S_IFSOCK) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(st.st_mode)
        if st.st_size > limit:
            raise too_large(st.st_size, limit)
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # grew since fstat
        raise too_large(None, limit)
    return data


def read_text(path: str | os.PathLike, limit: int = DEFAULT_LIMIT, root: str | os.PathLike | None = None,
              *, errors: str = "replace", follow_outside: bool = False) -> str:
    """:func:`read_bytes` decoded as UTF-8 (with ``errors``)."""
    return read_bytes(path, limit, root, follow_outside=follow_outside).decode("utf-8", errors=errors)


def special_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` (followed) is when it exists but is not a regular file: "a folder", "a FIFO",
    "a device", "a socket"; None for a regular file or nothing at all. Never blocks, never raises."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    return "a folder" if stat.S_ISDIR(mode) else _kind(mode)


def is_regular(path: str | os.PathLike) -> bool:
    """True when ``path`` (followed) is a regular file; never blocks, never raises."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
