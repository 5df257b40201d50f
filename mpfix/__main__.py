"""``python -m mpfix``."""

import os
import sys


def _regular_package_first() -> None:
    """Make ``mpfix`` the installed package even when the current folder holds a folder named ``mpfix``.

    ``python -m`` puts the current folder first on ``sys.path``. Run from the folder that
    contains a clone named ``mpfix/`` (its root has no ``__init__.py``), Python makes that
    folder a namespace package ``mpfix``; an editable install's import hook comes after the
    path search, so the real package never loads (``cannot import name '__version__'``).
    Such folders are dropped from ``sys.path`` and ``mpfix`` is imported again.
    """
    package = sys.modules.get("mpfix")
    if package is None or getattr(package, "__file__", None) is not None:
        return

    def shadows(entry: str) -> bool:
        folder = os.path.join(entry or os.curdir, "mpfix")
        return os.path.isdir(folder) and not os.path.isfile(os.path.join(folder, "__init__.py"))

    sys.path[:] = [entry for entry in sys.path if not shadows(entry)]
    for name in [n for n in sys.modules if n == "mpfix" or n.startswith("mpfix.")]:
        if name != __name__:
            del sys.modules[name]
    import importlib

    importlib.invalidate_caches()
    importlib.import_module("mpfix")


def _without_working_directory() -> None:
    """Drop the folder ``python -m`` put first on ``sys.path``: the current folder, which in CI is
    the checked-out repository. A ``click.py`` or ``libcst.py`` there would otherwise be imported
    in place of the real library, running the repository's code (issue 21). ``mpfix`` itself is
    imported already, and its submodules load from its own folder."""
    try:
        cwd = os.getcwd()
    except OSError:  # removed under us: ``mpfix.cli`` says so
        cwd = ""
    if sys.path and sys.path[0] in ("", cwd):
        del sys.path[0]


_regular_package_first()
_without_working_directory()

from mpfix.cli import main  # noqa: E402

if __name__ == "__main__":
    main(prog_name="mpfix")
