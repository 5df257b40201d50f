"""``mpfix.api.lint_text`` matches ``exclude`` globs below their configuration's folder (Ruff; the CLI).

Before, the globs were matched against the path as given (relative to the working directory, or
absolute), so a folder above the project could match them: a project checked out under
``.../build/proj`` with ``exclude = ["build/**"]`` (its own build output) was excluded whole, and a
subproject's ``exclude = ["sub/*.py"]`` dropped ``sub/a.py`` although below ``sub/`` there is no
``sub/a.py``. ``mpfix check`` groups files by their closest configuration and matches the path
below it (``config.by_closest_config``); the API now does the same.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from conftest import DEPRECATED

from mpfix import api
from mpfix.cli import cli


def _project(folder: Path, exclude: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f"[tool.mpfix]\nexclude = [{exclude}]\n")
    return folder


def _codes(path: Path) -> list[str]:
    """The codes found in DEPRECATED (MP306, ...) linted as ``path``; [] when ``path`` is excluded."""
    return [f.code for f in api.lint_text(DEPRECATED, path).findings]


def test_a_folder_above_the_project_does_not_match_its_exclude(tmp_path: Path, monkeypatch):
    proj = _project(tmp_path / "build" / "proj", '"build/**"')
    (proj / "build").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _codes(proj / "train.py") != []  # absolute path: /.../build/proj/train.py
    assert _codes(Path("build/proj/train.py")) != []  # relative to the working directory
    assert _codes(proj / "build" / "gen.py") == []  # the project's own build folder stays excluded
    assert _codes(Path("build/proj/build/gen.py")) == []


def test_a_subprojects_globs_are_based_at_its_own_folder(tmp_path: Path, monkeypatch):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.mpfix]\n")
    sub = _project(root / "sub", '"sub/*.py", "gen_*.py"')
    for name in ("a.py", "gen_1.py"):
        (sub / name).write_text(DEPRECATED)
    monkeypatch.chdir(root)
    assert _codes(Path("sub/a.py")) != []
    assert _codes(Path("sub/gen_1.py")) == []
    # The API and the CLI (the repository's configuration at the root, sub's nearer) agree on both files.
    result = CliRunner().invoke(cli, ["check", "."])
    assert "sub/a.py" in result.output and "gen_1.py" not in result.output


def test_the_cli_bases_the_root_configurations_globs_at_its_folder(tmp_path: Path, monkeypatch):
    """``mpfix check sub`` (sub's configuration is the root one) and ``mpfix check /abs/build/proj``
    matched the root configuration's globs against the paths as given: the project's own files went."""
    root = tmp_path / "repo"
    sub = _project(root / "sub", '"sub/*.py", "gen_*.py"')
    for name in ("a.py", "gen_1.py"):
        (sub / name).write_text(DEPRECATED)
    monkeypatch.chdir(root)
    for args in (["sub"], ["sub/a.py", "sub/gen_1.py"]):
        output = CliRunner().invoke(cli, ["check", *args]).output
        assert "sub/a.py" in output and "gen_1.py" not in output, (args, output)
    proj = _project(tmp_path / "build" / "proj", '"build/**"')
    (proj / "build").mkdir()
    (proj / "train.py").write_text(DEPRECATED)
    (proj / "build" / "gen.py").write_text(DEPRECATED)
    for args in ([str(proj)], [str(proj / "train.py"), str(proj / "build" / "gen.py")]):
        output = CliRunner().invoke(cli, ["check", *args]).output
        assert "train.py" in output and "gen.py" not in output, (args, output)
