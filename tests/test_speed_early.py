"""Facts-free files checked by the project pass's helpers while it runs (``mpfix.early``, ``runner._scan_projects``).

A file in which no float16 rule is triggered reads no project fact, so the helpers check it before the
workers start. Each test can fail on its own: the predicate must keep out every file that needs a fact,
the helpers must really check some files, and a pooled check (cold, then warm from the cache it wrote)
must give what one process gives.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from mpfix import early, runner
from mpfix.cache import Cache
from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options
from mpfix.runner import Job, Mode, process_all

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the runner forks helpers on Linux only")

LAYER = ("import tensorflow as tf\n\n\nclass Block{n}(tf.keras.layers.Layer):\n    def call(self, x):\n"
         "        return tf.cast(x, tf.float32) + tf.exp(x)\n")
DEPRECATED = ("import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f{n}(x):\n"
              "    return x\n")
PLAIN = "def helper{n}(x):\n    return x + {n}\n"


def _job() -> Job:
    return Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(), mode=Mode.CHECK)


def _project(root: Path) -> list[Path]:
    (root / "pkg").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "pkg" / "__init__.py").write_text("")
    imports = []
    for n in range(14):
        for kind, text in (("layer", LAYER), ("dep", DEPRECATED), ("plain", PLAIN)):
            (root / "pkg" / f"{kind}{n}.py").write_text(text.format(n=n))
            imports.append(f"import pkg.{kind}{n}\n")
    (root / "pkg" / "train.py").write_text("import tensorflow as tf\n"
                                           "tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
                                           + "".join(imports))
    return sorted(root.rglob("*.py"))


def _summary(results) -> list[tuple]:
    return [(r.path.name, [(f.code, f.line, f.column, f.message) for f in r.findings], [e.message for e in r.errors])
            for r in results]


def test_only_files_without_a_float16_trigger_are_facts_free(tmp_path: Path):
    engine = Engine(all_rules(), Options())
    keyer = Cache(tmp_path / "cache", _job()).keyer

    def free(name: str, text: str, ignored: tuple[str, ...] = ()) -> bool:
        return early.facts_free(tmp_path / name, text.encode(), ignored, engine, keyer)

    assert free("plain.py", PLAIN.format(n=1))
    assert free("dep.py", DEPRECATED.format(n=1))  # MP306 runs without the project
    assert not free("layer.py", LAYER.format(n=1))  # MP204/MP206 need the reach and the cross-file calls
    assert free("layer.py", LAYER.format(n=1), ignored=("MP2",))  # ignored there: nothing float16 runs
    assert not free("nb.ipynb", PLAIN.format(n=1))  # a notebook's triggers are its cells'
    # The cache key's own test reads the bytes without also_requires: a trigger there keeps the file out.
    assert not free("half.py", "x = 'float32'\n")
    # Bytes mpfix cannot decode: reported as they are, before any rule or fact (the error needs none).
    undecodable = LAYER.format(n=1).encode("utf-16")
    assert early.facts_free(tmp_path / "utf16.py", undecodable, (), engine, None)
    (tmp_path / "utf16.py").write_bytes(undecodable)
    assert runner.process_file(tmp_path / "utf16.py", _job(), early=True).errors


def _pooled_check(root: Path) -> None:
    """Run in a fresh interpreter (``__main__`` below): the runner forks helpers only while no other thread is
    alive (``runner._pool_context``), and a test session's other tests may leave one."""
    import os

    from mpfix import policy as policies
    from mpfix.project import facts

    paths = _project(root)
    assert len(paths) >= 32  # the runner's threshold for the project pass
    os.environ["MPFIX_CACHE_DIR"] = str(root / "cache")
    filled = []
    real = runner.collect

    def counting(pending, results, bar):
        before = sum(r is not None for r in results)
        real(pending, results, bar)
        filled.append(sum(r is not None for r in results) - before)

    runner.collect = counting
    before = {c.pid for c in multiprocessing.active_children()}
    pooled = process_all(paths, _job(), jobs=2, cache=True)
    assert {c.pid for c in multiprocessing.active_children()} <= before  # helpers and workers are gone
    assert filled and filled[0] >= 28, filled  # the plain and deprecated files, at least, were checked early
    warm = process_all(paths, _job(), jobs=2, cache=True)
    facts.forget()
    policies.forget_projects()
    alone = process_all(paths, _job(), jobs=1, cache=False)
    assert _summary(pooled) == _summary(alone) == _summary(warm)
    assert any(r.findings for r in alone if r.path.name.startswith("dep"))
    assert any(r.findings for r in alone if r.path.name.startswith("layer"))
    # What the early files proved clean went into the cache: the warm run checked no clean file again.
    assert all(r.cached for r in warm if not r.findings and not r.errors)


def test_a_pooled_check_with_early_files_equals_one_process(tmp_path: Path):
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("MPFIX_EARLY", None)
    child = subprocess.run([sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stdout + child.stderr


def test_mpfix_early_0_leaves_every_file_to_the_workers(tmp_path: Path, monkeypatch):
    paths = _project(tmp_path)
    called = []
    monkeypatch.setattr(runner, "EARLY", False)  # what MPFIX_EARLY=0 sets at import
    monkeypatch.setattr(runner, "collect", lambda *args: called.append(args))
    results = process_all(paths, _job(), jobs=2, cache=False)
    assert not called and all(r is not None for r in results)


def test_a_helper_that_dies_on_an_early_file_costs_only_that_file(tmp_path: Path, monkeypatch):
    # A native crash in a helper breaks the helpers' pool: the project pass computes its part in the parent,
    # and the early files go to the workers (where the same file kills a worker: it alone is reported).
    import os

    from mpfix import policy as policies
    from mpfix.project import facts

    paths = _project(tmp_path)
    parent = os.getpid()
    real = runner.process_file

    def dying(path, *args, **kwargs):
        if path.name == "plain3.py" and os.getpid() != parent:
            os._exit(9)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(runner, "process_file", dying)  # inherited by forked helpers and workers
    before = {c.pid for c in multiprocessing.active_children()}
    pooled = process_all(paths, _job(), jobs=2, cache=False)
    monkeypatch.setattr(runner, "process_file", real)
    assert {c.pid for c in multiprocessing.active_children()} <= before
    facts.forget()
    policies.forget_projects()
    alone = process_all(paths, _job(), jobs=1, cache=False)
    dead = [i for i, path in enumerate(paths) if path.name == "plain3.py"]
    assert [s for i, s in enumerate(_summary(pooled)) if i not in dead] == \
        [s for i, s in enumerate(_summary(alone)) if i not in dead]


if __name__ == "__main__":
    _pooled_check(Path(sys.argv[1]))
