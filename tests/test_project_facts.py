"""Project facts: what the rest of the project decides about one file, computed once per project.

F1 of the architecture review: MP205's "only tests call this factory" read other files of the
project, but that dependency was in no cache key, so a file stayed "clean" from the cache after
another file started calling its model. The facts now travel to each file as one record
(``mpfix.project.facts.ProjectFileFacts``) and that record is part of the file's cache key.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import cache as cache_mod
from mpfix import policy as policies
from mpfix.engine import Options
from mpfix.project import facts as project_facts
from mpfix.project.files import TestKind, is_test_code, project_files, test_kind
from mpfix.runner import Job, Mode, process_all

LIB = textwrap.dedent("""
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")


    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(10, activation="softmax")])
""").lstrip("\n")

TEST_LIB = "from pkg.lib import build\n\n\ndef test_build():\n    assert build() is not None\n"
TRAIN = "from pkg.lib import build\n\nmodel = build()\nmodel.fit([[1.0] * 4], [[0.0] * 10])\n"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(cache_mod.ENV_CACHE_DIR, raising=False)
    policies.forget_projects()
    yield
    policies.forget_projects()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _check(root: Path, *, cache: bool, **options) -> list[str]:
    job = Job(rule_codes=("MP205",), options=Options(keras="3", **options), mode=Mode.CHECK)
    files = sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts)
    results = process_all(files, job, jobs=1, cache=cache)
    return [f"{r.path.relative_to(root)}:{f.code}" for r in results for f in r.findings]


@pytest.mark.parametrize("options", [{}, {"policy": "mixed_float16"}], ids=["entry-points", "configured"])
def test_a_new_caller_in_another_file_invalidates_the_cached_result(project: Path, options):
    """The review's repro: only a test calls ``build()``; then ``train.py`` starts calling it."""
    _write(project, {"pkg/__init__.py": "", "pkg/lib.py": LIB, "tests/test_lib.py": TEST_LIB})
    assert _check(project, cache=True, **options) == []
    assert _check(project, cache=True, **options) == []  # served from the cache
    _write(project, {"train.py": TRAIN})  # lib.py itself is untouched
    policies.forget_projects()  # a new process: nothing remembered but the cache folder
    assert _check(project, cache=True, **options) == ["pkg/lib.py:MP205"]
    assert _check(project, cache=False, **options) == ["pkg/lib.py:MP205"]


def test_the_editor_server_forgets_the_callers_with_the_projects(project: Path):
    """A long-lived process (``mpfix server``) forgets project facts through ``policy.forget_projects``."""
    _write(project, {"pkg/__init__.py": "", "pkg/lib.py": LIB, "tests/test_lib.py": TEST_LIB})
    assert _check(project, cache=False) == []
    _write(project, {"train.py": TRAIN})
    assert _check(project, cache=False) == []  # same process, facts remembered (by design)
    policies.forget_projects()
    assert _check(project, cache=False) == ["pkg/lib.py:MP205"]


def test_file_facts_record_holds_the_test_helpers_and_keys_on_them(project: Path):
    _write(project, {"pkg/__init__.py": "", "pkg/lib.py": LIB, "tests/test_lib.py": TEST_LIB})
    lib = project / "pkg" / "lib.py"
    before = project_facts.file_facts(lib, consult_project=True, float16_rules=True)
    assert before.test_helpers == frozenset({"build"})
    assert before.reach is not None and str(before.reach.policy) == "mixed_float16"
    _write(project, {"train.py": TRAIN})
    policies.forget_projects()
    after = project_facts.file_facts(lib, consult_project=True, float16_rules=True)
    assert after.test_helpers == frozenset()
    assert before.key() != after.key()
    # Without float16 rules in play nothing the project decides about float16 can matter.
    plain = project_facts.file_facts(lib, consult_project=True, float16_rules=False)
    assert plain.reach is None and plain.test_helpers == frozenset()


def test_a_definition_is_not_a_call_but_a_call_in_the_same_file_is(project: Path):
    _write(project, {"pkg/__init__.py": "",
                     "pkg/lib.py": LIB + "\n\ndef main():\n    build().summary()\n",
                     "tests/test_lib.py": TEST_LIB})
    facts = project_facts.project_facts(project.resolve(), callers=True)
    assert facts.test_helpers_of(project / "pkg" / "lib.py") == frozenset()  # main() calls it too


@pytest.mark.parametrize(("path", "kind"), [
    ("pkg/test_model.py", TestKind.MODULE), ("pkg/model_test.py", TestKind.MODULE),
    ("tests/conftest.py", TestKind.MODULE), ("tests/helpers.py", TestKind.SUPPORT),
    ("test/data/make.py", TestKind.SUPPORT), ("pkg/model.py", TestKind.NONE), ("contest.py", TestKind.NONE),
])
def test_one_test_file_predicate(path, kind):
    assert test_kind(path) is kind
    assert is_test_code(path) is (kind is not TestKind.NONE)


def test_one_project_walker_skips_what_discovery_skips(project: Path):
    _write(project, {"a.py": "", "venv/lib/b.py": "", "build/c.py": "", ".mpfix_cache/d.py": "", "sub/e.py": ""})
    names = sorted(Path(p).relative_to(project.resolve()).as_posix() for p in project_files(project.resolve()))
    assert names == ["a.py", "sub/e.py"]


def test_the_runner_prepares_the_callers_index_before_forking_and_workers_agree(project: Path):
    """Run in worker processes (--jobs 2, enough files for the pre-fork scan): the same answer as in-process."""
    fillers = {f"pkg/mod{i}.py": f"import keras\nlayer{i} = keras.layers.Dense(4)\n" for i in range(36)}
    _write(project, {"pkg/__init__.py": "", "pkg/lib.py": LIB, "tests/test_lib.py": TEST_LIB, **fillers})
    job = Job(rule_codes=("MP205",), options=Options(keras="3"), mode=Mode.CHECK)
    files = sorted(p for p in project.rglob("*.py") if ".mpfix_cache" not in p.parts)
    assert [r for r in process_all(files, job, jobs=2, cache=True) if r.findings] == []
    from mpfix.runner import _pool_context

    if _pool_context().get_start_method() == "fork":  # spawned workers (other threads alive) inherit nothing
        assert [k for k in project_facts._MEMO if k[0] == "callers"] == [("callers", project)]  # computed here, in the parent
    _write(project, {"train.py": TRAIN})
    policies.forget_projects()
    files = sorted(p for p in project.rglob("*.py") if ".mpfix_cache" not in p.parts)
    found = [f"{r.path.relative_to(project)}:{f.code}" for r in process_all(files, job, jobs=2, cache=True)
             for f in r.findings]
    assert found == ["pkg/lib.py:MP205"]


HEAD = textwrap.dedent("""
    import tensorflow as tf


    class Head(tf.keras.layers.Layer):
        def call(self, x):
            return tf.exp(x) / tf.reduce_sum(tf.exp(x), axis=-1, keepdims=True)
""").lstrip("\n")
ENTRY = 'import tensorflow as tf\nfrom lib import Head\n\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'


def test_a_file_checked_through_a_symlinked_folder_keeps_its_float16_reach(tmp_path: Path):
    """The project root is a resolved folder, so its listing names real paths; a file given through
    a symlinked folder was looked up as given, found unreached and 'not checked for float16'."""
    real = tmp_path / "real" / "proj"
    _write(real, {"pyproject.toml": '[project]\nname = "p"\n', "train.py": ENTRY, "lib.py": HEAD})
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    job = Job(rule_codes=("MP204",), options=Options(keras="3"), mode=Mode.CHECK)
    by_real, by_link = (
        [(r.path.name, f.code, r.float16_unchecked) for r in process_all([root / "lib.py"], job, jobs=1, cache=False)
         for f in r.findings] for root in (real, tmp_path / "link" / "proj"))
    assert by_real == [("lib.py", "MP204", False)]
    assert by_link == by_real


def _declared_by_questions(path: Path) -> str:
    """``declared.cache_key`` composed from the public questions (what its per-folder memo must answer)."""
    from mpfix import declared

    found, newest, oldest = declared.target_for(path), declared.tf_max_for(path), declared.tf_min_for(path)
    bound = ("" if newest is None else f"|tf<={newest[0]}.{newest[1]}") + \
        ("" if oldest is None else f"|tf>={oldest[0]}.{oldest[1]}")
    return ("" if found is None else f"{found.keras}:{found.reason}") + bound


def test_declared_per_folder_memo_answers_as_the_questions_and_is_forgotten_with_them(tmp_path: Path):
    from mpfix import declared

    _write(tmp_path, {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["tensorflow>=2.16"]\n',
                      "pkg/lib.py": "x = 1\n"})
    lib = tmp_path / "pkg" / "lib.py"
    first = declared.cache_key(lib)
    assert first == _declared_by_questions(lib) and "tf>=2.16" in first
    assert declared.tf_max_for(lib) is None
    _write(tmp_path, {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["tensorflow>=2.4,<2.9"]\n'})
    declared.clear()
    second = declared.cache_key(lib)
    assert second != first and second == _declared_by_questions(lib)
    assert declared.tf_max_for(lib) == (2, 8)
    assert project_facts.file_facts(lib).tf_max == (2, 8) and project_facts.file_facts(lib).declared == second


def test_path_forms_follow_a_retargeted_folder_link_once_the_projects_are_forgotten(tmp_path: Path):
    from mpfix.project.files import path_forms

    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "one", target_is_directory=True)
    given = str(link / "a.py")
    assert path_forms(given) == (given, str((tmp_path / "one").resolve() / "a.py"))
    link.unlink()
    link.symlink_to(tmp_path / "two", target_is_directory=True)
    policies.forget_projects()
    assert path_forms(given) == (given, str((tmp_path / "two").resolve() / "a.py"))
