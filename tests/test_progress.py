"""The progress line moves from the start of a run (issue 15, defect 5)."""

from __future__ import annotations

import io

from mpfix import progress as progress_mod
from mpfix import runner
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all


def test_the_bar_is_drawn_before_the_first_file_finishes():
    stream = io.StringIO()
    with progress_mod.Progress(100, True, stream=stream):
        assert "0/100 files" in stream.getvalue()
    assert stream.getvalue().endswith("\r")  # erased at the end


_SLOW: dict = {}


def _slow_for_big(batch):
    """The runner's worker function; the batch that holds the big file waits until the parent has
    counted most of the others (or 120 s pass: a runner that counts in submission order never does)."""
    if any(path == _SLOW["big"] for path, _ in batch):
        released = _SLOW["release"].wait(120)
        _SLOW["marker"].write_text("released" if released else "timed out")
    return _SLOW["work"](batch)


def test_pool_results_are_counted_as_they_finish_not_in_submission_order(tmp_path, monkeypatch):
    # The first batch holds the largest file; it finishes last. The bar must count the others meanwhile.
    # No clock: the big file's batch is held until the bar shows 30 files (an event the forked workers
    # share), so a loaded machine cannot make the others late (it did use "within 2.5 s of the start").
    import multiprocessing

    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 20_000)
    small = []
    for i in range(40):
        path = tmp_path / f"small_{i:02}.py"
        path.write_text("y = 2\n")
        small.append(path)
    fork = multiprocessing.get_context("fork")
    release = fork.Event()  # made before the pool forks: its workers share it
    _SLOW.update(big=big, work=runner._work, release=release, marker=tmp_path / "marker")
    seen: list[int] = []

    class Recording(progress_mod.Progress):
        def update(self, count: int = 1) -> None:
            super().update(count)
            seen.append(self.done)
            if self.done >= 30:
                release.set()

    _slow_for_big.__qualname__ = _slow_for_big.__name__ = "_work"
    _slow_for_big.__module__ = runner.__name__  # pickled by name: the forked workers look up runner._work
    monkeypatch.setattr(runner, "_work", _slow_for_big)  # forked workers inherit the patch
    monkeypatch.setattr(progress_mod, "Progress", Recording)
    monkeypatch.setattr(runner, "_pool_context", lambda: fork)
    job = Job(rule_codes=("MP306",), options=Options(), mode=Mode.CHECK)
    results = process_all([big, *small], job, jobs=2, cache=False, progress=False)
    assert all(r is not None and r.clean for r in results)
    assert seen[-1] == 41
    # The big file's batch was held until 30 files were counted: counted as they finished.
    assert (tmp_path / "marker").read_text() == "released", seen
    assert seen[-2] >= 30, seen  # and the big file came back last
