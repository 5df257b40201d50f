"""Hostile globs (turn 8 audit): an ``exclude`` glob or a ``.gitignore`` line is a stranger's text too.
Bracket expressions that make no valid regex raised ``re.error`` from the walk (a traceback); many ``*``
in one path component made the backtracking regexes take seconds to hours per file name. Tests run the
CLI in a fresh process with a ceiling only a hang reaches."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEPRECATED

from mpfix.discovery import _glob, is_excluded

CEILING_S = 240


def _check(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", "--jobs", "1"], cwd=folder,
                          capture_output=True, text=True, timeout=CEILING_S)


@pytest.mark.parametrize("glob", ["[\\\\]x]", "[z-a].py", "[]", "[!]/*", "a[", "[[:alpha:]]*"])
def test_an_exclude_glob_that_makes_no_regex_is_no_traceback(tmp_path: Path, glob: str):
    (tmp_path / "pyproject.toml").write_text(f'[tool.mpfix]\nexclude = ["{glob}"]\n')
    (tmp_path / "a.py").write_text(DEPRECATED)
    done = _check(tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and "MP306" in done.stdout, done.stderr


def test_brackets_keep_their_meaning():
    assert is_excluded(Path("ax.py"), ("[ab]x.py",)) and not is_excluded(Path("cx.py"), ("[ab]x.py",))
    assert is_excluded(Path("cx.py"), ("[!ab]x.py",)) and not is_excluded(Path("ax.py"), ("[!ab]x.py",))
    assert is_excluded(Path("\\x]"), ("[\\]x]",))  # fnmatch's reading: a set holding a backslash, then "x]"
    assert not is_excluded(Path("a/x.py"), ("a[/]x.py",))  # a bracket never matches the separator


def _reference(pattern: str) -> re.Pattern[str]:
    """The translation before turn 8 (backtracking, correct on short inputs), bracket-free patterns only."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            out.append({"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i])))
            i += 1
    return re.compile("".join(out))


def test_the_linear_translation_matches_what_the_backtracking_one_matched():
    chooser = random.Random(8)
    tokens = ["a", "b", "*", "?", "/", "**/", "**", ".py"]
    for _ in range(4000):
        pattern = "".join(chooser.choice(tokens) for _ in range(chooser.randint(1, 7)))
        for _ in range(5):
            path = "".join(chooser.choice("ab/.") for _ in range(chooser.randint(0, 9)))
            expected = _reference(pattern).fullmatch(path) is not None
            assert (_glob(pattern).fullmatch(path) is not None) == expected, (pattern, path)


def test_many_stars_in_one_component_match_in_linear_time(tmp_path: Path):
    """``*a*a*a*a*a*a*a*a*a*a*b*`` against a 200-letter name: hours before; the file is checked now."""
    stars = "*a" * 10 + "*b*"
    (tmp_path / "pyproject.toml").write_text(f'[tool.mpfix]\nexclude = ["{stars}", "**/{stars}/**"]\n')
    (tmp_path / ("a" * 200 + ".py")).write_text(DEPRECATED)
    (tmp_path / "ab_kept.py").write_text(DEPRECATED)  # the glob does not fit it: ten a's are needed
    (tmp_path / ("a" * 12 + "b.py")).write_text(DEPRECATED)  # this one it fits: excluded
    done = _check(tmp_path)
    assert done.returncode == 1, done.stderr
    assert sorted(line.split(":")[0] for line in done.stdout.splitlines() if "MP306" in line) == sorted(
        ["a" * 200 + ".py", "ab_kept.py"])


def test_a_gitignore_line_that_would_backtrack_for_hours_is_not_used(tmp_path: Path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("*a" * 10 + "*b\nignored_*.py\n")
    (tmp_path / ("a" * 200 + ".py")).write_text(DEPRECATED)
    (tmp_path / "ignored_one.py").write_text(DEPRECATED)
    done = _check(tmp_path)
    assert done.returncode == 1, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines() if "MP306" in line] == ["a" * 200 + ".py"]
