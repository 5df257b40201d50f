"""Files from disk to results: read → (cache) → decode → lint/fix → (apply) write.

``process_file`` handles one file and never raises for bad input;
``process_all`` runs it over many files — in worker processes when there is
enough work (``--jobs``), skipping files the cache knows are clean — and
returns results in input order. ``Job`` and ``FileResult`` are picklable and
hold no CST nodes, so they cross process boundaries cheaply.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from mpfix import safe_read, unchecked
from mpfix.collector import tune as _tune_collector, tuned as _collector_tuned
from mpfix.early import ENABLED as EARLY, collect, facts_free
from mpfix.engine import Engine
from mpfix.jobs import FileResult, Job, Mode  # re-exported: callers import them from here
from mpfix.pools import stop_workers
from mpfix.project import current_scope, set_scope
from mpfix.findings import FileError
from mpfix.source import SourceError, decode, decode_notebook
from mpfix.writer import ChangedError, ReadOnlyError, write_atomic


_ENGINES: dict[tuple, Engine] = {}


def rules_for(job: Job) -> tuple:
    from mpfix.codemods import all_rules

    return tuple(r for r in all_rules() if r.code in job.rule_codes)


def engine_for(job: Job) -> Engine:
    key = (job.rule_codes, job.options)
    engine = _ENGINES.get(key)
    if engine is None:
        engine = _ENGINES[key] = Engine(rules_for(job), job.options)
    return engine


# -- reading -------------------------------------------------------------------------------

def _read(path: Path, limit: int) -> bytes:
    """The file's bytes through the safe reader (regular files inside the project, bounded)."""
    try:
        return safe_read.read_bytes(path, limit)
    except safe_read.Refused as exc:
        # A FIFO or device named *.py would block or never end; a link out of the tree is not followed.
        raise SourceError(exc.message) from exc


def _os_error(path: Path, exc: OSError, verb: str = "read") -> FileError:
    import errno

    reason = exc.strerror or str(exc)
    if exc.errno == errno.ELOOP:
        reason = "symbolic link loop"
    elif exc.errno == errno.ENOENT and os.path.islink(path):
        reason = f"broken symbolic link (target {os.readlink(path)!r} does not exist)"
    elif exc.errno == errno.ENOENT:
        reason = "no such file (deleted while mpfix was running?)"
    return FileError(str(path), f"cannot {verb} file: {reason}")


# -- one file ------------------------------------------------------------------------------

def process_file(path: Path, job: Job, ignored: tuple[str, ...] = (), accept=None, keyer=None,
                 early: bool = False) -> FileResult | None:
    """Lint (and for diff/apply, fix) one file; never raises for bad input.

    ``keyer`` (a ``cache.Keyer``): answer from its set of clean keys when the
    file is known clean, and record in ``clean_keys`` what this run proves clean. ``early``: only a file
    that needs no project fact (``mpfix.early``); None for any other.
    """
    try:
        return _process_file(path, job, ignored, accept, keyer, early)
    except Exception as exc:  # a bug anywhere (a notebook, the cache, a rule) costs this file only
        return FileResult(path=path, errors=[FileError(str(path), f"internal error in mpfix ({type(exc).__name__}: "
                                                                  f"{exc}); nothing was written; please report it")])


def _process_file(path: Path, job: Job, ignored: tuple[str, ...], accept, keyer, early: bool = False) -> FileResult | None:
    result = FileResult(path=path)
    try:
        data = _read(path, job.max_file_bytes)
        if early and not facts_free(path, data, ignored, engine_for(job), keyer):
            return None
    except SourceError as exc:
        result.errors.append(FileError(str(path), exc.message, exc.line, exc.column))
        return result
    except OSError as exc:
        result.errors.append(_os_error(path, exc))
        return result
    key = None
    if keyer is not None:
        key = keyer.key(path, data, ignored)
        if key in keyer.clean:
            result.cached = True
            return result
    try:
        source = decode_notebook(data) if path.suffix == ".ipynb" else decode(data)
    except SourceError as exc:
        result.errors.append(FileError(str(path), exc.message, exc.line, exc.column))
        return result
    if path.suffix == ".ipynb":
        from mpfix import notebooks

        result = notebooks.process_notebook(path, source, job, ignored, accept, engine=engine_for(job))
        result.float16_unchecked = unchecked.skipped(engine_for(job), source.text, path, ignored)
        if key is not None and result.clean and result.fixed is None and not result.written:
            result.clean_keys = (key,)
        return result
    engine = engine_for(job)
    fixing = job.mode is not Mode.CHECK
    try:
        lint = engine.lint(source.text, path, fix=fixing, edits=job.want_edits, ignored=ignored, accept=accept)
    except RecursionError:
        result.errors.append(FileError(str(path), "file is nested too deeply for the parser; nothing was written"))
        return result
    except Exception as exc:  # a bug in a rule must not stop the run or touch the file
        result.errors.append(FileError(str(path), f"internal error in mpfix ({type(exc).__name__}: {exc}); "
                                                  "nothing was written; please report it"))
        return result
    result.findings = lint.findings
    result.float16_unchecked = lint.float16_unchecked
    result.errors = lint.errors
    result.applied = lint.applied
    if job.want_edits and lint.findings:
        result.original = source.text  # excerpts and edits of the findings (--format full/json)
    if lint.fixed_text is not None and not lint.errors:
        result.original = source.text
        result.fixed = lint.fixed_text
        if job.mode is Mode.APPLY:
            try:
                new_bytes = source.encode(lint.fixed_text)
                write_atomic(path, new_bytes, expected=data)
                result.written = True
            except UnicodeEncodeError as exc:
                result.errors.append(FileError(str(path), f"fixed text cannot be encoded as {source.encoding}: "
                                                          f"{exc.reason}; nothing was written"))
            except ReadOnlyError:
                result.errors.append(FileError(str(path), "file is read-only; nothing was written "
                                                          "(make it writable to apply fixes)"))
            except (ChangedError, safe_read.Refused) as exc:
                result.errors.append(FileError(str(path), f"{exc.message}; nothing was written"
                                               if isinstance(exc, safe_read.Refused) else exc.message))
            except OSError as exc:
                error = _os_error(path, exc, "write")
                error.message += "; nothing was written"
                result.errors.append(error)
            else:
                if key is not None and result.clean:
                    # What was written has nothing left to fix: the next run can skip it.
                    result.clean_keys = (keyer.key(path, new_bytes, ignored),)
        return result
    if key is not None and result.clean:
        result.clean_keys = (key,)
    elif key is not None and job.mode is Mode.CHECK and result.findings and not result.errors:
        result.findings_key = key
    return result


# -- many files ----------------------------------------------------------------------------

class Terminated(SystemExit):
    """SIGTERM while files are processed, raised between two files: exits 128 + 15, the
    status a shell expects of a terminated command (files already fixed keep their fixes)."""


class _StopRequest:
    """SIGINT/SIGTERM during a run, noted by the handler and acted on between files.

    Raising from the handler would unwind from whatever bytecode runs at that moment,
    inside LibCST or a rule, and can leave their state half-built (seen in a test: a
    SIGTERM turned into a KeyError, swallowed, and the run went on). Between files
    nothing is half-done; a second signal stops at once.
    """

    signum: int | None = None
    deadline: threading.Timer | None = None  # forces the exit if the next boundary never comes


_STOP = _StopRequest()


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(128 + signum)


def _note_signal(signum, frame) -> None:
    if _STOP.signum is not None:
        _raise_for(signum)
    _STOP.signum = signum
    # A file that never reaches the next boundary (a read that blocks in the kernel) must not
    # keep the run alive: past this grace, the process ends anyway.
    _STOP.deadline = threading.Timer(_STOP_GRACE_S, _force_exit, args=(signum,))
    _STOP.deadline.daemon = True
    _STOP.deadline.start()


_STOP_GRACE_S = 10.0
_POLL_S = 0.2  # the pool's results are waited for this long between looks for a signal


def _force_exit(signum: int) -> None:
    sys.stderr.write(f"mpfix: {signal.Signals(signum).name}: the file in hand did not finish within "
                     f"{_STOP_GRACE_S:.0f} s; stopping now\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def check_stop() -> None:
    """Raise KeyboardInterrupt/Terminated if a signal arrived since the run started."""
    if _STOP.signum is not None:
        _raise_for(_STOP.signum)


def _note_worker_stop(signum, frame):
    # The parent stops workers with SIGTERM; like the parent, a worker finishes the file in
    # hand (a write is never cut between creating its temp file and renaming it) and leaves.
    # A worker waiting for work leaves at once: its blocked pipe read would only be retried.
    if not _WORKER.get("busy"):
        os._exit(128 + signum)
    _STOP.signum = signum


_WORKER: dict = {}


def _init_worker(job: Job, keyer, parent: int | None = None, scope=None) -> None:
    # Ctrl-C reaches the whole process group; the parent alone handles it and
    # stops the workers with SIGTERM, so workers print no tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _note_worker_stop)
    if parent is not None:
        from mpfix.lifeline import die_with_parent

        die_with_parent(parent)  # SIGTERM when the parent dies, even by SIGKILL
    _WORKER["job"] = job
    _WORKER["keyer"] = keyer
    set_scope(scope)  # a spawned worker's project roots are its parent's (mpfix.project)
    engine_for(job)  # once per process (already built in the parent when forked)
    _tune_collector()  # a spawned worker's own imports (forked ones inherit the parent's setting)


def _work(batch: list[tuple[Path, tuple[str, ...]]], early: bool = False) -> list[FileResult | None]:
    results = []
    _WORKER["busy"] = True
    try:
        for path, ignored in batch:
            if _STOP.signum is not None:
                os._exit(128 + _STOP.signum)  # the executor would only start the next file
            results.append(process_file(path, _WORKER["job"], ignored, None, _WORKER["keyer"], early))
    finally:
        _WORKER["busy"] = False
    if _STOP.signum is not None:
        os._exit(128 + _STOP.signum)
    return results


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _pool_context():
    import multiprocessing

    # fork: workers inherit the imported rules, the built engine and the project
    # policy scans (~0.3 s of imports saved per worker). Not with other threads
    # alive (a forked lock could be held forever), and not on macOS, where
    # system frameworks are not fork-safe.
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _batches(paths: list[Path], todo: list[int], workers: int) -> list[list[int]]:
    """``todo`` in batches for the workers: largest files first, about equal bytes per batch.

    Parse time follows size, and one 12,500-line module (keras' numpy_test.py) takes over two
    seconds: started last, it would leave the other workers idle while it runs. Largest first, with
    ~32 batches per worker, the run ends on small files; batching keeps the messages
    to and from the workers few.
    """
    sizes: dict[int, int] = {}
    for i in todo:
        try:
            sizes[i] = paths[i].stat().st_size
        except OSError:
            sizes[i] = 0  # process_file reports it
    target = max(1, sum(sizes.values()) // (workers * 32))
    batches: list[list[int]] = []
    batch: list[int] = []
    weight = 0
    for i in sorted(todo, key=lambda i: -sizes[i]):
        batch.append(i)
        weight += sizes[i]
        if weight >= target:
            batches.append(batch)
            batch, weight = [], 0
    if batch:
        batches.append(batch)
    return batches


def process_all(paths: list[Path], job: Job, ignored_for: dict[Path, tuple[str, ...]] | None = None, *,
                jobs: int | None = None, cache: bool = True, progress: bool = False,
                accept=None) -> list[FileResult]:
    """Process every file; results come back in the order of ``paths``.

    ``jobs``: worker processes (None: one per core; one file to process,
    ``jobs=1`` or ``accept`` given: in-process). ``cache``: skip files the
    cache of clean results knows, and record new clean ones. ``progress``:
    show a progress line on stderr for long runs.
    """
    from mpfix.progress import Progress

    ignored_for = ignored_for or {}
    paths = list(paths)
    store = None
    if cache and accept is None and paths:
        from mpfix.cache import Cache, cache_dir_for

        store = Cache(cache_dir_for(paths), job)
    else:
        from mpfix import policy as policies

        policies.use_store(None)  # no cache: project scans are neither read nor written
    results: list[FileResult | None] = [None] * len(paths)
    # Interactive review keeps Ctrl-C immediate: it must work at the y/n prompt.
    restore = _install_signal_handlers(defer_sigint=accept is None)
    try:
        with Progress(len(paths), progress) as bar:
            todo = _lookup(paths, job, ignored_for, store, results, bar)
            workers = min(jobs or default_jobs(), len(todo))
            with _collector_tuned():  # forked workers inherit it
                if workers <= 1 or accept is not None:
                    keyer = store.keyer if store is not None else None
                    for i in todo:
                        check_stop()
                        results[i] = process_file(paths[i], job, ignored_for.get(paths[i], ()), accept, keyer)
                        bar.update()
                    check_stop()
                else:
                    _run_pool(paths, todo, job, ignored_for, store, results, bar, workers)
    except Terminated:
        sys.stderr.write("mpfix: terminated; files already fixed keep their fixes, the rest are untouched\n")
        raise
    finally:
        restore()
    if store is not None:
        for r in results:
            store.add(r.clean_keys)
            if r.findings_key is not None:
                store.add_findings(r.findings_key, job.want_edits, r.findings)
        store.save()
    return results  # type: ignore[return-value]


def _lookup(paths, job, ignored_for, store, results, bar) -> list[int]:
    """Fill in the cached results; the indices of the files left to process."""
    if store is None or store.empty:
        # Cold: reading and hashing every file here first would only delay the workers,
        # which compute the keys of what they prove clean anyway.
        return list(range(len(paths)))
    todo = []
    for i, path in enumerate(paths):
        try:
            data = _read(path, job.max_file_bytes)
        except (OSError, SourceError):
            todo.append(i)  # process_file reports it
            continue
        clean, findings = False, None
        for n, key in enumerate(store.keyer.lookup_keys(path, data, ignored_for.get(path, ()))):
            clean = store.hit(key)
            if not clean and job.mode is Mode.CHECK:
                findings = store.cached_findings(key, job.want_edits, str(path))
            if clean or findings is not None:
                break
        if clean:
            # Stored under the second key (its project's policy): a float16 trigger matched.
            results[i] = FileResult(path=path, cached=True, float16_unchecked=n == 1 and unchecked.reach_is_none(path))
            bar.update()
            continue
        if findings is None:
            todo.append(i)
            continue
        result = results[i] = FileResult(path=path, findings=findings, cached=True,
                                         float16_unchecked=n == 1 and unchecked.reach_is_none(path))
        if job.want_edits:
            try:
                result.original = decode(data).text  # for --format full excerpts
            except SourceError:
                pass
        bar.update()
    return todo


def _scan_projects(paths, todo, job, workers: int, keyer=None, ignored_for=None, results=None, bar=None) -> list[int]:
    """Scan the projects for float16 entry points once, before forking, so that workers inherit
    the result instead of each scanning them again (only for runs big enough to need it).

    The scan's per-file summaries and the callers index are made in ``workers`` short-lived helper
    processes meanwhile (``facts.prepare``): the same facts, on every core instead of one. In a check
    (``results`` given), the helpers first check the files that need no project fact (``mpfix.early``):
    those fill the time the parent computes alone. Returns the indices of ``todo`` left to the workers."""
    if (len(todo) < 32 or _pool_context().get_start_method() != "fork"
            or not any(r.requires_float16 for r in rules_for(job))):
        return todo
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from mpfix import policy as policies
    from mpfix.project.facts import prepare

    roots = {}
    for i in todo:
        folder = paths[i].parent
        if folder not in roots:
            roots[folder] = policies.project_root(paths[i])
    earlier = {child.pid for child in multiprocessing.active_children()}
    # Forked at its first task (none where every fact comes from the store).
    early = EARLY and results is not None and job.mode is Mode.CHECK  # a check writes nothing (mpfix.early)
    helpers = ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_init_worker if early else _init_helper,
                                  initargs=(job, keyer, os.getpid(), current_scope()) if early else (os.getpid(),))
    helpers._mpfix_earlier = earlier
    pending = {}
    try:
        for batch in _batches(paths, todo, workers) if early else ():
            task = [(paths[i], ignored_for.get(paths[i], ())) for i in batch]
            pending[helpers.submit(_work, task, True)] = batch
        for root in set(roots.values()):
            # The project facts each file's key and rules read (mpfix.project.facts): reach, callers index.
            prepare(root, consult_project=job.options.policy is None and job.options.project_policy, pool=helpers)
    except BaseException:
        stop_workers(helpers, grace=0.0)
        raise
    if getattr(helpers, "_broken", False):
        stop_workers(helpers, grace=0.0)  # a helper died: prepare computed its part here
    helpers.shutdown(wait=True)  # its manager thread gone: the workers below may fork
    if not early:
        return todo
    collect(pending, results, bar)
    return [i for i in todo if results[i] is None]


def _init_helper(parent: int) -> None:
    # The parent's handlers came with the fork: Ctrl-C is the parent's to handle, and SIGTERM (from
    # stop_workers, or the lifeline when the parent dies) ends a helper at once: it writes nothing.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from mpfix.lifeline import die_with_parent

    die_with_parent(parent)


def _run_pool(paths, todo, job, ignored_for, store, results, bar, workers) -> None:
    """Run ``todo`` in worker processes; a worker that dies (OOM killer, a crash in a C
    extension) costs its files a second, in-process try instead of hanging the run."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from dataclasses import replace

    engine_for(job)  # built before forking, inherited by every worker
    keyer = None
    if store is not None:
        keyer = replace(store.keyer, clean=frozenset())  # lookups are done; workers only compute keys
    todo = _scan_projects(paths, todo, job, workers, keyer, ignored_for, results, bar)
    if not todo:
        return
    batches = _batches(paths, todo, workers)
    tasks = [[(paths[i], ignored_for.get(paths[i], ())) for i in batch] for batch in batches]
    earlier = {child.pid for child in multiprocessing.active_children()}
    executor = ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_init_worker,
                                   initargs=(job, keyer, os.getpid(), current_scope()))
    executor._mpfix_earlier = earlier  # children that are not this pool's workers
    try:
        # In completion order, not submission order: the first batches hold the largest files, and
        # waiting for them kept the progress bar blank for most of a run. A signal is acted on within
        # _POLL_S, not when the next batch ends: a batch holding a large file (seconds, more on a loaded
        # machine) used up the _STOP_GRACE_S that stopping the workers also needs.
        from concurrent.futures import FIRST_COMPLETED, wait

        pending = {executor.submit(_work, task): batch for batch, task in zip(batches, tasks)}
        waiting = set(pending)
        while waiting:
            done, waiting = wait(waiting, timeout=_POLL_S, return_when=FIRST_COMPLETED)
            for future in done:
                for i, result in zip(pending[future], future.result()):
                    results[i] = result
                    bar.update()
            check_stop()
    except BrokenProcessPool:
        # The survivors may be blocked on a queue lock the dead worker left behind: a SIGTERM
        # handler cannot reach them there, and the executor would wait for them at exit forever.
        stop_workers(executor, grace=0.0)
        from mpfix.lifeline import run_isolated

        for i in todo:
            if results[i] is None:
                # Each in a forked child of its own: the file that killed a worker (a native crash
                # the parse pre-check did not foresee) is reported alone, and the run goes on.
                result, why = run_isolated(process_file, paths[i], job, ignored_for.get(paths[i], ()), None, keyer,
                                           label="this file")
                results[i] = result if result is not None else FileResult(
                    path=paths[i], errors=[FileError(str(paths[i]), f"{why}; nothing was written; please report it")])
                bar.update()
    except BaseException:
        # Ctrl-C or SIGTERM in the parent: stop the workers now. SIGTERM makes each
        # one unwind its current file (no temp file left) and exit.
        stop_workers(executor, grace=5.0)
        raise
    else:
        executor.shutdown(wait=True)


def _install_signal_handlers(defer_sigint: bool = True):
    """Defer SIGTERM (and SIGINT) to the next file boundary while files are processed; returns a restorer."""
    _STOP.signum = None
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    signals = (signal.SIGTERM, signal.SIGINT) if defer_sigint else (signal.SIGTERM,)
    previous = {}
    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, _note_signal)
    except (ValueError, OSError):
        pass

    def restore() -> None:
        if _STOP.deadline is not None:
            _STOP.deadline.cancel()
            _STOP.deadline = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def is_terminal() -> bool:
    return os.isatty(2)
