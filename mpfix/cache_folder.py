"""What the cache folder and the project-facts store share: the folder's ``.gitignore`` and the
fingerprint of mpfix's own code (a leaf module: ``mpfix.cache`` and ``mpfix.project.store`` both
use it, and neither may import the other)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def code_fingerprint() -> list[tuple[str, int, int]]:
    """(name, size, mtime) of the modules whose code decides findings.

    The rules package is located, not imported: importing it runs every rule's module.
    """
    entries = []
    for package in ("mpfix.codemods", "mpfix"):
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
            # Subpackages too (the shared analyses live in one): a change anywhere decides findings.
            for dirpath, dirnames, filenames in os.walk(folder):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                relative = os.path.relpath(dirpath, folder).replace(os.sep, "/")
                prefix = package if relative == "." else f"{package}/{relative}"
                for name in sorted(filenames):
                    if name.endswith(".py"):
                        try:
                            st = os.stat(os.path.join(dirpath, name))
                        except OSError:
                            continue
                        entries.append((f"{prefix}/{name}", st.st_size, st.st_mtime_ns))
    return entries


def ensure_folder(directory: Path) -> None:
    """Create the cache folder with a ``.gitignore`` of ``*``, so it never shows in ``git status``.

    Raises OSError (callers then write no cache) when the folder a checkout shipped holds symbolic
    links: a ``.mpfix_cache`` link, a link for one of its subfolders or a dangling ``.gitignore``
    link would send mpfix's writes outside the project (``mpfix.safe_read``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    check_folder(directory)
    gitignore = os.path.join(directory, ".gitignore")
    try:
        # O_EXCL | O_NOFOLLOW: never through a link, never over an existing file.
        fd = os.open(gitignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write("# Created by mpfix: the cache of clean results is local to this machine.\n*\n")


def check_folder(directory: Path) -> None:
    """OSError when ``directory`` is a symbolic link (unless ``$MPFIX_CACHE_DIR`` names it) or holds one."""
    chosen = os.environ.get("MPFIX_CACHE_DIR")
    if os.path.islink(directory) and not (chosen and os.path.abspath(chosen) == os.path.abspath(directory)):
        raise OSError(f"{directory} is a symbolic link: the cache is not used")
    try:
        with os.scandir(directory) as entries:
            links = [entry.name for entry in entries if entry.is_symlink()]
    except FileNotFoundError:
        return
    if links:
        raise OSError(f"{directory} holds symbolic links ({', '.join(sorted(links))}): the cache is not used")
