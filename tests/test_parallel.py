"""--jobs: worker processes give the same results, in input order, as one process."""

from __future__ import annotations

import io
import multiprocessing
import pickle
from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix.codemods import all_rules
from mpfix import runner
from mpfix.engine import Options
from mpfix.progress import Progress
from mpfix.runner import FileResult, Job, Mode, process_all

CLEAN = "def double(x):\n    return x * 2\n"


def _job(mode: Mode = Mode.CHECK) -> Job:
    return Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(keras="3", unsafe_fixes=True),
               mode=mode)


def _mixed(folder: Path, count: int = 30) -> list[Path]:
    """Clean files, files with findings and unreadable ones, interleaved."""
    files = []
    for i in range(count):
        path = folder / f"m{i:02d}.py"
        kind = i % 3
        if kind == 0:
            path.write_text(CLEAN + f"y = {i}\n")
        elif kind == 1:
            path.write_text(DEPRECATED + f"y = {i}\n")
        else:
            path.write_text(DEPRECATED + "def broken(:\n")  # has a trigger, so it is parsed
        files.append(path)
    return files


def _summary(results: list[FileResult]) -> list[tuple]:
    return [(r.path.name, [(f.code, f.line) for f in r.findings], [e.message for e in r.errors], r.fixed)
            for r in results]


def test_parallel_results_equal_sequential_ones_in_input_order(tmp_path: Path):
    files = _mixed(tmp_path)
    shuffled = files[::2] + files[1::2]  # order is the caller's, not the disk's
    one = process_all(shuffled, _job(Mode.DIFF), jobs=1, cache=False)
    two = process_all(shuffled, _job(Mode.DIFF), jobs=2, cache=False)
    assert [r.path for r in two] == shuffled
    assert _summary(two) == _summary(one)
    assert sum(1 for r in two if r.errors) == 10 and sum(1 for r in two if r.fixed) == 10


def test_parallel_apply_writes_every_file_once(tmp_path: Path):
    files = [tmp_path / f"f{i}.py" for i in range(12)]
    for path in files:
        path.write_text(DEPRECATED)
    results = process_all(files, _job(Mode.APPLY), jobs=2, cache=False)
    assert all(r.written and r.applied == 2 for r in results)
    assert all(path.read_text() == DEPRECATED_FIXED for path in files)


def test_job_and_results_cross_process_boundaries(tmp_path: Path):
    (path,) = _mixed(tmp_path, 2)[1:]
    checked = process_all([path], _job(Mode.CHECK), jobs=1, cache=False)
    fixed = process_all([path], _job(Mode.DIFF), jobs=1, cache=False)
    assert checked[0].findings and fixed[0].fixed
    job = _job()
    assert pickle.loads(pickle.dumps(job)) == job
    for results in (checked, fixed):
        assert _summary(pickle.loads(pickle.dumps(results))) == _summary(results)


def test_spawned_workers_build_their_own_engine(tmp_path: Path, monkeypatch):
    # macOS and threaded hosts get "spawn": nothing is inherited, everything must pickle.
    monkeypatch.setattr(runner, "_pool_context", lambda: multiprocessing.get_context("spawn"))
    files = _mixed(tmp_path, 6)
    assert _summary(process_all(files, _job(), jobs=2, cache=False)) == \
        _summary(process_all(files, _job(), jobs=1, cache=False))


@pytest.mark.parametrize("case", ["jobs=1", "one file", "interactive"])
def test_no_pool_where_it_cannot_pay_off(tmp_path: Path, monkeypatch, case: str):
    def no_pool():
        raise AssertionError("a process pool was started")

    monkeypatch.setattr(runner, "_pool_context", no_pool)
    files = _mixed(tmp_path, 4)
    asked = []
    if case == "jobs=1":
        results = process_all(files, _job(), jobs=1, cache=False)
    elif case == "one file":
        results = process_all(files[1:2], _job(), jobs=8, cache=False)
    else:  # the accept callback is a closure over the terminal: it cannot cross to a worker
        results = process_all(files, _job(Mode.DIFF), jobs=8,
                              accept=lambda finding, before, after: asked.append(finding.code) or True)
        assert sorted(asked) == ["MP306", "MP307"]
        assert sum(1 for r in results if r.fixed) == 1
        return
    assert sum(1 for r in results if r.findings) == 1


def test_batches_start_with_the_largest_files_and_cover_each_file_once(tmp_path):
    sizes = [10, 5_000, 300, 0, 80_000, 1_200, 40, 40, 700, 20_000]
    paths = []
    for n, size in enumerate(sizes):
        path = tmp_path / f"m{n}.py"
        path.write_text("#" * size)
        paths.append(path)
    paths.append(tmp_path / "deleted.py")  # gone since discovery: still scheduled, reported later
    todo = list(range(len(paths)))
    batches = runner._batches(paths, todo, workers=2)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == todo
    assert flat[0] == sizes.index(80_000) and batches[0] == [flat[0]]  # alone: it is a whole batch's worth
    assert [paths[i].stat().st_size for i in flat[:-1]] == sorted(sizes, reverse=True)
    assert len(runner._batches(paths, [3, 10], workers=2)) == 1  # nothing to weigh: one batch, no division by 0


def test_progress_line_only_for_long_runs():
    stream = io.StringIO()
    with Progress(50, True, stream) as bar:
        for _ in range(50):
            bar.update()
    text = stream.getvalue()
    assert "\r" in text and "50/50 files" in text and text.endswith("\r")  # erased at the end
    for total, enabled in ((50, False), (20, True)):
        stream = io.StringIO()
        with Progress(total, enabled, stream) as bar:
            for _ in range(total):
                bar.update()
        assert stream.getvalue() == ""


def test_process_all_shows_progress_on_stderr(tmp_path: Path, capsys):
    files = [tmp_path / f"c{i}.py" for i in range(25)]
    for path in files:
        path.write_text(CLEAN)
    process_all(files, _job(), jobs=2, cache=False, progress=True)
    assert "25/25 files" in capsys.readouterr().err
    process_all(files, _job(), jobs=2, cache=False, progress=False)
    assert capsys.readouterr().err == ""


def test_a_worker_that_dies_does_not_hang_the_run(tmp_path: Path, monkeypatch):
    # The OOM killer or a crash in a C extension ends a worker without a word: its unfinished
    # files are retried, each in a forked child of its own (lifeline.run_isolated), instead of
    # waiting forever for them. The file that kills every process it runs in is reported alone;
    # every other file gets the result a sequential run gives it. (With other threads alive, as
    # in a full test session, the retry runs in this process, where the file does not kill it.)
    import os

    parent = os.getpid()
    real = runner.process_file

    def dying(path, *args, **kwargs):
        if path.name == "m05.py" and os.getpid() != parent:
            os._exit(9)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(runner, "process_file", dying)  # inherited by forked workers
    files = _mixed(tmp_path, 12)
    import multiprocessing

    results = process_all(files, _job(), jobs=2, cache=False)
    monkeypatch.setattr(runner, "process_file", real)
    expected = _summary(process_all(files, _job(), jobs=1, cache=False))
    dead = [i for i, path in enumerate(files) if path.name == "m05.py"]
    assert dead and [s for i, s in enumerate(_summary(results)) if i not in dead] == \
        [s for i, s in enumerate(expected) if i not in dead]
    assert _summary(results)[dead[0]] in (expected[dead[0]], (
        "m05.py", [], ["mpfix's worker for this file exited with status 9; nothing was written; please report it"],
        None))
    # No worker outlives the run: a survivor blocked on a queue lock would hang the
    # interpreter's exit (it once kept a finished pytest session alive).
    assert [p for p in multiprocessing.active_children() if p.is_alive()] == []


def test_the_collector_setting_is_scoped_to_the_run(tmp_path: Path, monkeypatch):
    import gc

    from mpfix import collector

    files = _mixed(tmp_path, 6)
    seen = []
    real = runner.process_file

    def spy(*args, **kwargs):
        seen.append((gc.get_threshold(), gc.get_freeze_count() > 0))
        return real(*args, **kwargs)

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    monkeypatch.setattr(runner, "process_file", spy)
    process_all(files, _job(), jobs=1, cache=False)
    assert seen and all(s == (collector.THRESHOLDS, True) for s in seen)
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_an_embedding_programs_own_freeze_is_left_as_it_was(tmp_path: Path):
    """A program that froze the collector itself and then calls mpfix: the run tunes the thresholds but
    does not freeze again (that made what the program allocated since its freeze permanent)."""
    import gc

    files = _mixed(tmp_path, 6)
    frozen_by_program = [[]]
    gc.freeze()
    try:
        before = gc.get_threshold()
        allocated_since = [[]]  # a tracked container, collectable: it must stay so
        process_all(files, _job(), jobs=1, cache=False)
        assert gc.get_threshold() == before
        collectable = {id(o) for o in gc.get_objects()}  # the permanent generation's are not listed
        still_collectable, still_frozen = id(allocated_since) in collectable, id(frozen_by_program) not in collectable
        assert still_collectable, "the run froze what the program allocated after its freeze"
        assert still_frozen, "the run undid the program's own freeze"
    finally:
        gc.unfreeze()
