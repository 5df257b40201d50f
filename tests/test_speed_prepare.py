"""The project pass in helper processes (``facts.prepare(pool=...)``, the runner's pool run): the scan's
eager summaries and the callers index are made there, and the facts are the very same as computed in
one process; a pool that breaks costs nothing but the time (the parent computes what is missing)."""

from __future__ import annotations

import multiprocessing
import sys
import textwrap
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.project import crosscalls, facts

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the runner forks helpers on Linux only")

LAYER = textwrap.dedent("""
    import tensorflow as tf

    from pkg import utils
    from pkg.base import BaseBlock


    class Block{n}(BaseBlock):
        def call(self, x):
            y = x * 2.0
            return utils.act(y, rate=0.5)


    def build{n}(n):
        block = Block{n}()
        return utils.apply(block, n)
""").lstrip("\n")
UTILS = textwrap.dedent("""
    import tensorflow as tf


    def act(features, rate=1.0):
        return tf.nn.relu(features) * rate


    def apply(model, n):
        return model(n)


    def only_tests_call_me():
        return tf.keras.Sequential([tf.keras.layers.Dense(1)])
""").lstrip("\n")
TEST = "from pkg.utils import only_tests_call_me\n\n\ndef test_it():\n    only_tests_call_me()\n"


def _project(root: Path) -> Path:
    (root / "pkg").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "base.py").write_text("import tensorflow as tf\n\n\nclass BaseBlock(tf.keras.layers.Layer):\n"
                                          "    pass\n")
    (root / "pkg" / "utils.py").write_text(UTILS)
    for n in range(2 * crosscalls._CHUNKS):
        (root / "pkg" / f"layer{n}.py").write_text(LAYER.format(n=n))
    (root / "pkg" / "utils_test.py").write_text(TEST)
    return root.resolve()


class Recording(Executor):
    """A real fork pool that counts what it was given."""

    def __init__(self) -> None:
        self.pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
        self.tasks: list[str] = []

    def submit(self, fn, /, *args, **kwargs):
        self.tasks.append(fn.__name__)
        return self.pool.submit(fn, *args, **kwargs)


class Broken(Executor):
    """A pool whose workers die: every answer is BrokenProcessPool (after the first ``fail_after``, submit raises)."""

    def __init__(self, fail_after: int) -> None:
        self.submitted = 0
        self.fail_after = fail_after

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        if self.submitted > self.fail_after:
            raise BrokenProcessPool("a helper died")
        future: Future = Future()
        future.set_exception(BrokenProcessPool("a helper died"))
        return future


def _facts(root: Path, pool=None):
    facts.forget()
    policies.use_store(None)
    facts.prepare(root, consult_project=False, pool=pool)
    found = facts._cross_calls(root, False), facts._helpers(root)
    facts.forget()
    return found


def test_helper_processes_make_the_same_facts(tmp_path: Path):
    root = _project(tmp_path)
    alone = _facts(root)
    assert alone[0] and alone[1]  # the project has cross-file calls and a test-only helper
    pool = Recording()
    try:
        pooled = _facts(root, pool)
    finally:
        pool.pool.shutdown()
    assert 2 <= pool.tasks.count("_summaries") <= crosscalls._CHUNKS and pool.tasks[-1] == "test_helpers"
    assert pooled == alone


@pytest.mark.parametrize("fail_after", [0, 3, 100])
def test_a_broken_pool_costs_only_time(tmp_path: Path, fail_after: int):
    root = _project(tmp_path)
    assert _facts(root, Broken(fail_after)) == _facts(root)


def test_check_with_workers_finds_what_one_process_finds(tmp_path: Path):
    from mpfix.engine import Options
    from mpfix.runner import Job, Mode, process_all

    root = _project(tmp_path)
    (root / "pkg" / "train.py").write_text("import tensorflow as tf\n"
                                           "tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
                                           "import pkg.layer0\n")
    paths = sorted(root.rglob("*.py")) * 2  # over the runner's 32-file threshold for the project pass
    job = Job(rule_codes=("MP201", "MP204", "MP205"), options=Options(), mode=Mode.CHECK)
    before = {c.pid for c in multiprocessing.active_children()}
    pooled = process_all(paths, job, jobs=2, cache=False)
    assert {c.pid for c in multiprocessing.active_children()} <= before  # helpers and workers are gone
    facts.forget()
    alone = process_all(paths, job, jobs=1, cache=False)
    assert [(r.path, [f.code for f in r.findings], r.errors) for r in pooled] == \
           [(r.path, [f.code for f in r.findings], r.errors) for r in alone]


def test_a_helper_that_dies_costs_only_time(tmp_path: Path, monkeypatch):
    import os

    from mpfix.pools import stop_workers

    root = _project(tmp_path)
    alone = _facts(root)
    parent = os.getpid()
    real = crosscalls.summarise

    def dies_in_a_helper(*args, **kwargs):
        if os.getpid() != parent:
            os._exit(9)  # a native crash, the OOM killer
        return real(*args, **kwargs)

    monkeypatch.setattr(crosscalls, "summarise", dies_in_a_helper)  # forked helpers inherit it
    before = {c.pid for c in multiprocessing.active_children()}
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
    try:
        assert _facts(root, pool) == alone
    finally:
        stop_workers(pool, grace=0.0)
        pool.shutdown(wait=True)
    assert {c.pid for c in multiprocessing.active_children()} <= before


def test_literal_led_class_patterns_match_as_the_line_start_ones():
    """``call_pattern.CLASS_NAME``/``top_class`` search for ``class`` first and check the line start behind it:
    the same answers as ``^class...`` (MULTILINE), a BOM and form feeds before a top-level class included."""
    import re

    from mpfix.project.call_pattern import CLASS_NAME, top_class

    line_start_name = re.compile(rb"^class[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
    line_start_top = re.compile(rb"^(?:\xef\xbb\xbf)?\f*class\b", re.MULTILINE)
    samples = [b"\xef\xbb\xbfclass A: pass", b"x\n\fclass A(B):", b"x\n\xef\xbb\xbf\f\fclass A", b"  class A(B):",
               b"classy = 1", b"\nclass\n", b"x\rclass A(B)", b"\f\xef\xbb\xbfclass A", b"a.class(x)\nclass B (C):\n",
               b"# class A(B):\nclass C(D, E):\n    class F(G): pass\n", b""]
    samples += [path.read_bytes() for path in sorted(Path(crosscalls.__file__).parent.glob("*.py"))]
    assert any(top_class(s) for s in samples) and any(not top_class(s) for s in samples)
    for data in samples:
        assert CLASS_NAME.findall(data) == line_start_name.findall(data), data[:40]
        assert top_class(data) == (line_start_top.search(data) is not None), data[:40]


def test_stop_workers_waits_for_the_managers_pipe_to_close():
    """After ``stop_workers`` the interpreter's exit hook (``_python_exit``) cannot write to the executor's
    wake-up pipe while the manager thread closes it: that race printed a Bad-file-descriptor traceback when
    ``apply --jobs 2`` was interrupted (CI, turn 14). The manager is out of the hook's table, and it ends
    and closes its pipe (``stop_workers`` waits for that; the bound here is only for a stalled machine)."""
    import time
    from concurrent.futures import process

    from mpfix.pools import stop_workers

    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
    futures = [pool.submit(time.sleep, 30) for _ in range(4)]
    while not any(f.running() for f in futures):
        time.sleep(0.01)
    manager, wakeup = pool._executor_manager_thread, pool._executor_manager_thread_wakeup  # shutdown forgets them
    assert manager in process._threads_wakeups
    stop_workers(pool, grace=1.0)
    assert manager not in process._threads_wakeups
    manager.join(120)
    assert not manager.is_alive()
    assert wakeup._closed


def test_a_manager_slower_than_stop_workers_wait_is_out_of_the_exit_hooks_reach(monkeypatch):
    """The interleaving CI had, forced: the manager thread has not closed its wake-up pipe when
    ``stop_workers`` returns (its wait ran out on a stalled machine). The exit hook must not find it:
    it would write to that pipe, unlocked, while the manager closes it."""
    import threading
    import time
    from concurrent.futures import process

    from mpfix import pools

    release = threading.Event()
    real = process._ExecutorManagerThread.join_executor_internals

    def slow(self):
        release.wait(120)
        real(self)

    monkeypatch.setattr(process._ExecutorManagerThread, "join_executor_internals", slow)
    monkeypatch.setattr(pools, "MANAGER_JOIN_S", 0.2)
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
    futures = [pool.submit(time.sleep, 30) for _ in range(4)]
    while not any(f.running() for f in futures):
        time.sleep(0.01)
    manager, wakeup = pool._executor_manager_thread, pool._executor_manager_thread_wakeup
    try:
        pools.stop_workers(pool, grace=1.0)
        assert manager.is_alive() and not wakeup._closed  # the wait ran out first
        assert manager not in process._threads_wakeups  # _python_exit will not write to its pipe
    finally:
        release.set()
        manager.join(120)
    assert not manager.is_alive() and wakeup._closed
