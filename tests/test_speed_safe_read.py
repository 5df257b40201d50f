"""``safe_read.check_inside`` asks the kernel for a path's real path (one ``O_PATH`` open) before Python's
``os.path.realpath`` (an lstat per component): the answers are the same for plain files, links inside and out
of the project, dangling links, loops, FIFOs and ``..`` after a link, and a plain file costs no realpath."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mpfix import safe_read


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    proj, out = tmp_path / "proj", tmp_path / "out"
    (proj / "sub").mkdir(parents=True)
    out.mkdir()
    (proj / "pyproject.toml").write_text("")
    (proj / "sub" / "a.py").write_text("x = 1\n")
    (out / "b.py").write_text("y = 2\n")
    (proj / "linkdir").symlink_to("sub")
    (proj / "outlink").symlink_to("../out")
    (proj / "sub" / "l.py").symlink_to("a.py")
    (proj / "dangling.py").symlink_to("nowhere")
    (proj / "loop").symlink_to("loop")
    if hasattr(os, "mkfifo"):
        os.mkfifo(proj / "fifo.py")
    return proj


CASES = ["sub/a.py", "linkdir/a.py", "outlink/b.py", "sub/l.py", "dangling.py", "loop", "fifo.py", "sub/../sub/a.py",
         "linkdir/../sub/a.py", "outlink/../proj/sub/a.py", "nope/x.py", "sub", "sub/a.py/x"]


def _old_check_inside(path) -> str:
    """``check_inside`` as it was: ``os.path.realpath`` only."""
    real = os.path.realpath(path)
    if real == os.path.abspath(path):
        return real
    base = safe_read.project_root(path)
    if not safe_read._within(real, base):
        raise safe_read.Refused(safe_read.Reason.OUTSIDE, "outside")
    return real


@pytest.mark.parametrize("relative", [True, False])
def test_check_inside_answers_as_realpath_does(tree: Path, relative: bool, monkeypatch):
    monkeypatch.chdir(tree)
    for case in CASES:
        path = case if relative else str(tree / case)
        kernel = safe_read._kernel_realpath(path)
        assert kernel is None or kernel == os.path.realpath(path), case
        try:
            expected = _old_check_inside(path)
        except safe_read.Refused:
            expected = "refused"
        try:
            found = safe_read.check_inside(path)
        except safe_read.Refused:
            found = "refused"
        assert found == expected, case
    assert safe_read.check_inside(tree / "linkdir" / "a.py") == str(tree / "sub" / "a.py")
    with pytest.raises(safe_read.Refused):
        safe_read.check_inside(tree / "outlink" / "b.py")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd: Linux")
def test_a_plain_file_costs_no_realpath(tree: Path, monkeypatch):
    calls = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: calls.append(p) or real(p, *a, **k))
    assert safe_read.read_bytes(tree / "sub" / "a.py") == b"x = 1\n"
    assert calls == []
    assert safe_read.read_bytes(tree / "linkdir" / "a.py") == b"x = 1\n"  # a link: realpath decides, as before
    assert calls
