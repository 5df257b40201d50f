"""The repository's training scripts, each folder copied as a project of its own (a uniquely named helper module:
tests/test_speed_gate.py and tests/test_speed_twotier.py check the gates on them)."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("samples", "benchmarks/unseen", "tests/rules/fixtures", "tests/verify/scripts")


def copied_scripts(tmp_path: Path) -> list[Path]:
    """The scripts of ``FOLDERS``, each folder copied under ``tmp_path`` with a ``pyproject.toml`` of its own (its
    facts, not mpfix's)."""
    found = []
    for folder in FOLDERS:
        source = ROOT / folder
        if not source.is_dir():
            continue
        dest = tmp_path / folder.replace("/", "_")
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
        (dest / "pyproject.toml").write_text("[project]\nname = 'scripts'\n")
        found.extend(sorted(dest.rglob("*.py")))
    return found
