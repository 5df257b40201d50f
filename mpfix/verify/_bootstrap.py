"""Child entry point: ``python -m mpfix.verify._bootstrap --config FILE``.

Sets seeds, installs the hooks, then runs the user's script unmodified with
``runpy.run_path(..., run_name="__main__")``, its own folder first on ``sys.path`` and its
own ``sys.argv``. Everything the parent learns arrives as JSON lines in the records file
named by the config (never by reading the script's stdout):

``start`` (versions, device), ``step`` (one per optimizer step), ``hook-error``,
``numerics`` (under ``--locate``: the op check_numerics stopped at, with the traceback),
``crash`` (the script's own exception), ``end`` (why the script stopped).

Only this module and the ``_``-prefixed modules it loads import TensorFlow.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import random
import runpy
import sys
import threading
import traceback

EXIT_NO_GPU = 3


class _Events:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        self.many([event])

    def many(self, events: list[dict]) -> None:
        """One write (and flush) for a batch of events."""
        text = "".join(json.dumps(event, allow_nan=False) + "\n" for event in events)
        with self._lock:
            self._file.write(text)
            self._file.flush()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a top-level module finishes importing, so Keras 2
    hooks cost nothing for scripts that never import ``tf_keras``."""

    def __init__(self, callbacks: dict) -> None:
        self.callbacks = callbacks
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name not in self.callbacks or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return None
        callback = self.callbacks.pop(name)
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            callback()

        loader.exec_module = exec_then_hook
        return spec


def _frames(tb) -> list[dict]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for frame in traceback.extract_tb(tb):
        filename = os.path.abspath(frame.filename)
        if filename.startswith(here) or frame.filename.startswith("<frozen"):
            continue
        out.append({"file": filename, "line": frame.lineno, "function": frame.name, "code": frame.line or ""})
    return out


def _numerics_summary(text: str) -> str:
    """check_numerics messages embed whole input tensors: keep the header, dtype, shape,
    counts and (for ops inside graphs) the stack trace of the op's creation."""
    keep, skipping = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Input tensors"):
            skipping = True
        elif stripped.startswith("Stack trace of op's creation") or stripped.startswith(": Tensor had"):
            skipping = False
        if not skipping and stripped:
            keep.append(line.rstrip())
    return "\n".join(keep)[:6000]


def _is_numerics_error(exc: BaseException) -> bool:
    text = str(exc)
    return "CheckNumerics" in text or "Infinity or NaN" in text


def _set_seeds(seed: int) -> None:
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    import tensorflow as tf

    # Only records a seed: it does not initialise the runtime, so a script can still
    # configure logical devices afterwards.
    tf.random.set_seed(seed)


def _global_policies() -> dict:
    """The global dtype policy of each Keras generation loaded, for the record."""
    out = {}
    if "keras" in sys.modules:
        try:
            from keras.src.dtype_policies import dtype_policy

            out["keras3"] = dtype_policy.dtype_policy().name
        except Exception:
            pass
    if "tf_keras" in sys.modules:
        try:
            from tf_keras.src.mixed_precision import policy

            out["keras2"] = policy.global_policy().name
        except Exception:
            pass
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "--config":
        print("usage: python -m mpfix.verify._bootstrap --config FILE", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as fh:
        config = json.load(fh)
    emit = _Events(config["records"])

    _set_seeds(int(config["seed"]))
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    emit(
        {
            "event": "start",
            "mode": config["mode"],
            "tensorflow": tf.__version__,
            "gpus": len(gpus),
            "device": "gpu" if gpus else "cpu",
            "pid": os.getpid(),
        }
    )
    if config.get("device") == "gpu" and not gpus:
        emit({"event": "error", "kind": "no-gpu", "message": "no GPU is visible to TensorFlow"})
        return EXIT_NO_GPU

    from mpfix.verify import _hooks, _keras_hooks

    rec = _hooks.Recorder(emit, int(config["steps"]), locate=bool(config.get("locate")))
    _hooks.install_core(rec)
    mode, policy = config["mode"], config.get("policy", "script")

    def keras3():
        try:
            _keras_hooks.install_keras3(rec, mode, policy)
        except ImportError:
            pass

    def keras2():
        _keras_hooks.install_keras2(rec, mode, policy)

    pending = {}
    for name, install in (("keras", keras3), ("tf_keras", keras2)):
        if name in sys.modules:
            install()
        else:
            pending[name] = install
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending))
    if "keras" in sys.modules:
        try:
            import keras

            keras.utils.set_random_seed(int(config["seed"]))
        except (ImportError, AttributeError):
            pass

    if config.get("locate"):
        # Eager execution makes the Python traceback of the failing op point at the
        # user's line (graphs and XLA clusters would report the function call instead).
        tf.config.run_functions_eagerly(True)
        tf.debugging.enable_check_numerics()

    script = os.path.abspath(config["script"])
    sys.argv = [script, *config.get("args", [])]
    sys.path.insert(0, os.path.dirname(script))
    status: dict = {"event": "end", "status": "finished"}
    try:
        runpy.run_path(script, run_name="__main__")
    except _hooks.StopVerify as stop:
        status = {"event": "end", "status": "stopped", "reason": str(stop)}
    except SystemExit as exit_:
        code = exit_.code
        status = {"event": "end", "status": "exit", "code": code if isinstance(code, int) else (0 if code is None else 1)}
    except BaseException as exc:  # the script's own failure is a verdict, not our error
        if config.get("locate") and _is_numerics_error(exc):
            emit({"event": "numerics", "message": _numerics_summary(str(exc)), "frames": _frames(exc.__traceback__)})
            status = {"event": "end", "status": "located"}
        else:
            emit(
                {
                    "event": "crash",
                    "type": type(exc).__name__,
                    "message": str(exc)[:2000],
                    "frames": _frames(exc.__traceback__),
                }
            )
            status = {"event": "end", "status": "crashed"}
    try:
        rec.flush(may_stop=False, force=True)
    except Exception as exc:
        emit({"event": "hook-error", "where": "final flush", "error": repr(exc)[:500]})
    status.update(steps=rec.steps, entries=sorted(rec.entries), keras=sorted(rec.generations), policies=_global_policies())
    emit(status)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: TensorFlow's can take seconds and the script's own
    # atexit work is not part of what is measured.
    os._exit(code)
