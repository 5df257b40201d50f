"""The callers index after an edit (turn 18): what it reads of each file (``callers.file_row``: the names the file
calls, those it defines) is kept per file beside the reach scan's rows (``reach_records``, ``callerfiles-*.json``),
so only the edited files are read again, and the index is the one a run without a store computes, whatever the
store holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.project import callers, file_records, store
from mpfix.project import facts as project_facts

FILES = {
    "pyproject.toml": "[project]\nname = 'p'\n",
    "lib/__init__.py": "",
    "lib/models.py": "def build():\n    return 1\n\n\ndef make():\n    return 2\n",
    "lib/train.py": "from lib.models import make\n\nmake()\n",
    "lib/data.py": "def load(path):\n    return open(path)\n",
    "tests/test_models.py": "from lib.models import build\n\n\ndef test_build():\n    assert build()\n",
}
_STAMP = [1_600_000_000]


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(store, "RACY_NS", -10**18)  # written just now: trust the timestamps at once
    _write(tmp_path, FILES)
    kept = store.folder()
    yield tmp_path
    store.use(kept)
    policies.forget_projects()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _STAMP[0] += 1
        os.utime(path, ns=(_STAMP[0] * 10**9, _STAMP[0] * 10**9))


def _index(root: Path, monkeypatch, *, cached: bool) -> tuple[dict, set[str]]:
    """(the callers index by relative path, the files it read) in a fresh process's state."""
    policies.forget_projects()
    store.use(root / ".cache" if cached else None)
    read: set[str] = set()
    real = callers._read

    def counting(path):
        read.add(Path(path).relative_to(root).as_posix())
        return real(path)

    with monkeypatch.context() as patch:
        patch.setattr(callers, "_read", counting)
        found = project_facts.project_facts(root, callers=True).helpers
    return {Path(p).relative_to(root).as_posix(): names for p, names in found.items()}, read


def test_after_an_edit_only_the_edited_file_is_read_for_the_callers_index(project: Path, monkeypatch):
    first, read = _index(project, monkeypatch, cached=True)
    assert first == {"lib/models.py": {"build"}} and "lib/data.py" in read
    assert first == _index(project, monkeypatch, cached=False)[0]
    # The training code now calls build() too: no longer a test helper. Only the edited file is read again.
    _write(project, {"lib/train.py": "from lib.models import build, make\n\nmake()\nbuild()\n"})
    after, read = _index(project, monkeypatch, cached=True)
    assert after == {} and read == {"lib/train.py"}
    assert after == _index(project, monkeypatch, cached=False)[0]
    # A new test file calling make(), the training code no longer calling it: make() is a test helper now.
    _write(project, {"tests/test_make.py": "from lib.models import make\n\n\ndef test_make():\n    make()\n",
                     "lib/train.py": "from lib.models import build\n\nbuild()\n"})
    after, read = _index(project, monkeypatch, cached=True)
    assert after == {"lib/models.py": {"make"}} and read == {"tests/test_make.py", "lib/train.py"}
    assert after == _index(project, monkeypatch, cached=False)[0]


@pytest.mark.parametrize("damage", [7, "x", [["a"]], [["a"], ["b"], ["c"]], [[1], []], [["a"], {"b": 1}], None])
def test_a_damaged_or_hostile_row_is_read_again(project: Path, monkeypatch, damage):
    expected = _index(project, monkeypatch, cached=False)[0]
    _index(project, monkeypatch, cached=True)
    (name,) = [p.name for p in (project / ".cache").glob("callerfiles-*.json")]
    data = file_records.load_json(project / ".cache", name)
    row = data["files"][str(project / "tests/test_models.py")]
    row["callers"] = damage  # with its digest written again: well-formed JSON of the wrong shape
    assert file_records.save_json(project / ".cache", name, data)
    _write(project, {"lib/data.py": "def load(path):\n    return open(path, 'rb')\n"})  # the project's store misses
    found, read = _index(project, monkeypatch, cached=True)
    assert found == expected and read == {"lib/data.py", "tests/test_models.py"}
