"""The parts of a SARIF 2.1.0 log that ``mpfix check --format sarif`` and ``verify``/``repair --sarif`` share.

A leaf: it imports no rule, so ``mpfix.verify`` (whose runtime findings are written with it)
does not load the rules package to write a log (``mpfix.output.sarif`` does, for its descriptors).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from mpfix import __version__

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/mpfix/mpfix"


def uri(filename: str) -> str:
    """The artifact's URI: relative to the working directory (``%SRCROOT%``) when it is below it.

    A URI reference (SARIF §3.4.3): a space, ``#``, ``?``, ``%`` or a non-ASCII letter in a file name is
    percent-encoded, as ``Path.as_uri`` does for absolute ones (``my file#2.py`` is ``my%20file%232.py``;
    unescaped, ``#2.py`` would read as a fragment).
    """
    path = Path(filename)
    try:
        below = path.absolute().relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.absolute().as_uri()
    # The file system's bytes (a name that is not UTF-8, '\udcff' here, is %FF), as Path.as_uri does.
    return quote(os.fsencode(below), safe="/")


def region(line: int, column: int, end_line: int, end_column: int) -> dict:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": max(end_column, column)}


def location(filename: str, where: dict) -> dict:
    """One result location: the file (``uri``) and its ``region``."""
    return {"physicalLocation": {"artifactLocation": {"uri": uri(filename), "uriBaseId": "%SRCROOT%"},
                                 "region": where}}


def log(rules: list[dict], results: list[dict], properties: dict | None = None) -> dict:
    """A one-run log of mpfix's ``results``, with the ``%SRCROOT%`` base their locations name."""
    run: dict = {
        "tool": {"driver": {"name": "mpfix", "version": __version__, "informationUri": INFORMATION_URI,
                            "rules": rules}},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
        "results": results,
    }
    if properties:
        run["properties"] = properties
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
