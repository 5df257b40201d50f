"""The pre-commit case: after an edit of some files, the project facts are rebuilt from per-file records
(``mpfix.project.file_records``): only the edited files are parsed again, and the facts and findings are exactly
what a run without a cache computes, whatever the edit changes (a new call from a Keras layer's ``call``, a policy
set in an imported function, a deleted file, a new file, a renamed class) and whatever the store holds.
"""

from __future__ import annotations

import ast
import json
import os
import random
import textwrap
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.codemods import all_rules
from mpfix.engine import Options
from mpfix.project import ast_json, file_records, store, summary_json
from mpfix.project import facts as project_facts
from mpfix.project.crosscall_summary import summarise
from mpfix.runner import Job, Mode, process_all

from analysis.project_fixtures import _fresh, project  # noqa: F401  (fixtures; tests/ is on sys.path)
from analysis.test_crossfile import BASE, ENTRY, EXTRACT, LAYERS, NET, TRAIN, UTILS

FILES = {
    "pkg/__init__.py": "",
    "pkg/utils.py": UTILS,
    "pkg/base.py": BASE,
    "pkg/layers.py": LAYERS.replace("ARGUMENT", "x"),
    "pkg/net.py": NET,
    "pkg/extract.py": EXTRACT,
    "train.py": ENTRY,
    "train_delf.py": TRAIN,
    "tests/test_net.py": "from pkg.net import GlobalNet\n\n\ndef test_net():\n    assert GlobalNet() is not None\n",
}
_STAMP = [1_700_000_000]


@pytest.fixture(autouse=True)
def _not_racy(monkeypatch):
    """The files here are written just before they are checked: trust their timestamps at once (``RACY_NS``)."""
    monkeypatch.setattr(store, "RACY_NS", -10**18)


def _write(root: Path, files: dict[str, str | None]) -> None:
    """Write (None: delete) files, each with an mtime of its own: an edit a store keyed on mtimes must see."""
    for name, text in files.items():
        path = root / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _STAMP[0] += 1
        os.utime(path, ns=(_STAMP[0] * 10**9, _STAMP[0] * 10**9))


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts)


def _run(root: Path, *, cache: bool) -> tuple[list, dict]:
    """A fresh process's ``mpfix check`` of the project: its findings, and each file's project facts."""
    policies.forget_projects()
    job = Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all(_sources(root), job, jobs=1, cache=cache)
    findings = [(str(r.path.relative_to(root)), f.code, f.line, f.message) for r in results for f in r.findings]
    facts = {str(p.relative_to(root)): project_facts.file_facts(p).key() for p in _sources(root)}
    return findings, facts


def _agree(root: Path) -> tuple[list, dict]:
    """The cached run (its store warm from the runs before) computes what a run without a cache does."""
    cached = _run(root, cache=True)
    assert cached == _run(root, cache=False)
    return cached


EDITS = [
    # no cross-file fact changes: a comment, a docstring
    {"pkg/utils.py": "# the activations\n" + UTILS},
    {"pkg/extract.py": '"""Descriptors."""\n' + EXTRACT},
    # a Keras layer's call starts calling another function of utils.py
    {"pkg/layers.py": LAYERS.replace("ARGUMENT", "utils.srelu_fn(x)")},
    # a policy set in an imported function (a new entry point through a call)
    {"pkg/policy.py": "import tensorflow as tf\n\n\ndef enable():\n"
                      "    tf.keras.mixed_precision.set_global_policy('mixed_float16')\n",
     "pkg/extract.py": "from pkg import policy\n" + EXTRACT + "\n\npolicy.enable()\n"},
    # a deleted file: Block's base class is gone
    {"pkg/base.py": None},
    # a new file that defines it again, differently spelt
    {"pkg/base.py": "import tensorflow as tf\n\n\nclass BaseBlock(tf.keras.Model):\n    pass\n"},
    # a renamed class
    {"pkg/net.py": NET.replace("GlobalNet", "GlobalNetwork"),
     "train_delf.py": TRAIN.replace("GlobalNet", "GlobalNetwork")},
    # a file that no longer parses, then parses again
    {"pkg/utils.py": UTILS + "\ndef broken(:\n"},
    {"pkg/utils.py": UTILS},
]


def test_every_edit_leaves_the_cached_facts_equal_to_a_run_without_a_cache(project: Path):
    _write(project, FILES)
    seen = [_agree(project)[1]]
    for edit in EDITS:
        _write(project, edit)
        seen.append(_agree(project)[1])
    changed = sum(a != b for a, b in zip(seen, seen[1:]))
    assert changed >= 5  # the edits do change the facts the store must not keep


def _parsed_during_project_pass(root: Path, monkeypatch, functions=((ast, "parse"),)) -> set[str]:
    """The project files whose text the project facts hand ``functions`` (``ast.parse``: parse; the reach scan's
    ``entries_in``/``imports_in``: read for entry points, imports), in a fresh process with the store in use."""
    texts = {p.read_bytes(): str(p.relative_to(root)) for p in _sources(root)}
    parsed: set[str] = set()

    def counting(real):
        def count(source, *args, **kwargs):
            if source in texts:
                parsed.add(texts[source])
            return real(source, *args, **kwargs)
        return count

    policies.forget_projects()
    store.use(root / ".mpfix_cache" / "store")
    with monkeypatch.context() as patch:
        for module, name in functions:
            patch.setattr(module, name, counting(getattr(module, name)))
        project_facts.project_facts(policies.project_root(root / "train.py"), callers=True)
    store.use(None)
    return parsed


def test_after_an_edit_only_the_edited_files_are_parsed_again(project: Path, monkeypatch):
    _write(project, FILES)
    first = _parsed_during_project_pass(project, monkeypatch)
    assert {"pkg/utils.py", "pkg/layers.py", "pkg/net.py"} <= first  # a cold store parses what float16 reaches
    assert _parsed_during_project_pass(project, monkeypatch) == set()  # nothing changed: the stored facts
    _write(project, {"pkg/utils.py": UTILS + "\n\ndef unused(x):\n    return x\n"})
    assert _parsed_during_project_pass(project, monkeypatch) == {"pkg/utils.py"}
    _write(project, {"pkg/layers.py": "LIMIT = 3\n" + FILES["pkg/layers.py"], "pkg/extract.py": "# e\n" + EXTRACT})
    assert _parsed_during_project_pass(project, monkeypatch) == {"pkg/layers.py", "pkg/extract.py"}
    # (a question the join never asked before, a function called as a helper with other parameters, reads its
    # file once more: ``file_records.Records.helper_sites``)


def test_after_an_edit_only_the_edited_files_are_read_for_the_reach_scan(project: Path, monkeypatch):
    from mpfix.project import reachability

    reads = ((reachability, "entries_in"), (reachability, "imports_in"))
    _write(project, FILES)
    assert len(_parsed_during_project_pass(project, monkeypatch, reads)) == len(FILES)
    assert _parsed_during_project_pass(project, monkeypatch, reads) == set()
    _write(project, {"pkg/extract.py": "import os\n" + EXTRACT})
    assert _parsed_during_project_pass(project, monkeypatch, reads) == {"pkg/extract.py"}


def _records(root: Path) -> list[Path]:
    return sorted((root / ".mpfix_cache").rglob("file-*.json")) + sorted((root / ".mpfix_cache").rglob("reachfiles-*"))


_WRONG = [7, "x", True, 1.5, [[]], [{"_": "AST"}], {"_": "Module"}, {"_": "Starred"}, {"$": "b", "v": "zz"},
          {"_": "Name", "id": 3}, {"_": "Name", "id": "x", "ctx": {"_": "Add"}}, {"_": "Pass"}]


def _mutate(value, rng: random.Random):
    """``value`` with one element somewhere in it changed to a value of the wrong type (or an invalid node)."""
    if isinstance(value, dict) and value and rng.random() < 0.85:
        key = rng.choice(sorted(value))
        return {**value, key: _mutate(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.85:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate(value[i], rng), *value[i + 1:]]
    return rng.choice([w for w in _WRONG if type(w) is not type(value) or isinstance(w, dict)])


@pytest.mark.parametrize("seed", range(8))
def test_a_damaged_or_hostile_store_costs_time_only(project: Path, seed: int):
    _write(project, FILES)
    expected = _agree(project)
    rng = random.Random(seed)
    for path in _records(project):
        digest, _, body = path.read_text().partition("\n")
        data = json.loads(body)
        kind = rng.randrange(4)
        if kind == 0:  # torn: half a record
            path.write_text(f"{digest}\n{body[:len(body) // 2]}")
        elif kind == 1:  # damaged: one value changed, the digest kept
            path.write_text(f"{digest}\n{json.dumps(_mutate(data, rng))}")
        elif kind == 2:  # hostile: a value of the wrong type, with its digest written again
            from mpfix.project.file_records import _digest

            body = json.dumps(_mutate(data, rng))
            path.write_text(f"{_digest(body)}\n{body}")
        else:  # nested past any recursion limit, with its digest
            from mpfix.project.file_records import _digest

            body = '{"key": ' + "[" * 100_000 + "]" * 100_000 + "}"
            path.write_text(f"{_digest(body)}\n{body}")
    _write(project, {"pkg/extract.py": "# edited\n" + EXTRACT})  # the project's stored facts miss: records are read
    assert _agree(project) != expected  # (the edit moved a finding: the facts were computed again)


# -- the JSON forms, exactly --------------------------------------------------------------------------------------

def _plain(value):
    """A summary as nested plain values (``ast`` nodes by their dump with positions): equal iff equal."""
    if isinstance(value, ast.AST):
        return ast.dump(value, include_attributes=True)
    if is_dataclass(value):
        return (type(value).__name__, *(_plain(getattr(value, f.name)) for f in fields(value)))
    if isinstance(value, dict):
        return [(k, _plain(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(value)
    return value


TRICKY = textwrap.dedent('''
    import tensorflow as tf
    from pkg import utils


    class Head(tf.keras.layers.Layer):
        def call(self, x, *rest, scale=1.0, **kw):
            y = utils.f(x, b"\\x00\\xff", 1j, 1e999, ..., -0.0, 0xFFFFFFFFFFFFFFFFFFFFFFFF, "\\ud800", scale=scale)
            a, b = utils.g(y)
            y += utils.h(*rest, **kw, z={**kw, 1: None}, w=lambda q, *, r=2: q[1:2, ...])
            for i in range(3):
                y = utils.k(f"{y!r:>{i}}", [v async for v in x] if x else (yield from x))
            return utils.act(y, self.act)


    def train(model):
        net = Head()
        return utils.run(net, lambda v: net(v), model.call)
''').lstrip("\\n")


@pytest.mark.parametrize("source", [TRICKY, UTILS, LAYERS.replace("ARGUMENT", "x"), NET, EXTRACT, TRAIN])
def test_a_summary_comes_back_from_json_exactly(source: str):
    summary = summarise("/p/pkg/m.py", source.encode(), "pkg.m", {"pkg", "pkg.utils", "utils"}.__contains__)
    assert summary is not None and (summary.class_sites or summary.plain_sites or source is not TRICKY)
    back = summary_json.decode(json.loads(json.dumps(summary_json.encode(summary))))
    assert _plain(back) == _plain(summary)


def test_ast_json_round_trips_and_refuses_what_ast_would_not_build():
    tree = ast.parse(TRICKY)
    assert ast.dump(ast_json.decode(json.loads(json.dumps(ast_json.encode(tree)))), include_attributes=True) == \
        ast.dump(tree, include_attributes=True)
    for bad in [{"_": "AST"}, {"_": "Num", "n": 1}, {"_": "Name", "id": 3}, {"_": "Name", "id": "x", "ctx": {"_": "Add"}},
                {"_": "Name", "id": "x", "extra": 1}, {"_": "Constant", "value": {"$": "f", "v": "nan"}},
                {"_": "Call", "func": {"_": "Pass"}, "args": [], "keywords": []}, {"_": "Tuple", "elts": [None]},
                {"_": "Constant", "value": [1]}, {"_": "Name", "id": "x", "lineno": "1"}, "Name", [{"_": "Pass"}]]:
        with pytest.raises(ValueError):
            ast_json.decode_expr(bad)


def test_a_file_changed_in_the_last_two_seconds_gets_no_record(project: Path, monkeypatch):
    """Two writes of the same size within one timestamp tick look the same to ``os.stat``: a just-changed file is read
    again next time rather than trusted."""
    monkeypatch.setattr(store, "RACY_NS", 2_000_000_000)
    _write(project, FILES)
    first = _parsed_during_project_pass(project, monkeypatch)
    (project / "pkg" / "utils.py").write_text(UTILS.replace("srelu_fn", "srelu_gn"))  # same size, ctime now
    assert _parsed_during_project_pass(project, monkeypatch) == first  # none kept: every file read again
    assert not _records(project)


def test_a_long_lived_process_without_a_cache_folder_keeps_the_records_in_memory(project: Path, monkeypatch):
    """``mpfix server`` forgets the project facts on every save: with ``keep_in_memory`` the facts are joined again
    from records in memory, exactly, and only the saved file is parsed again."""
    _write(project, FILES)
    root = policies.project_root(project / "train.py")
    file_records.keep_in_memory()
    try:
        def facts(edit: dict, memory: bool = True):
            _write(project, edit)
            policies.forget_projects()
            store.use(None)
            parsed: set[str] = set()
            texts = {p.read_bytes(): str(p.relative_to(project)) for p in _sources(project)}
            real = ast.parse

            def count(source, *args, **kwargs):
                parsed.add(texts.get(source, "?"))
                return real(source, *args, **kwargs)

            with monkeypatch.context() as patch:
                patch.setattr(ast, "parse", count)
                if not memory:
                    patch.setattr(file_records, "_MEMORY", None)
                found = project_facts.project_facts(root, callers=True)
                return (found.calls, found.held, found.helpers, found.reach.reached), parsed

        assert facts({})[0] == facts({}, memory=False)[0]
        for edit in EDITS[:4]:
            found, parsed = facts(edit)
            assert found == facts({}, memory=False)[0]
            # (the third edit makes utils.srelu_fn a helper of a layer's call: a question never asked before)
            assert parsed <= set(edit) | ({"pkg/utils.py"} if edit is EDITS[2] else set())
    finally:
        file_records.keep_in_memory(False)
