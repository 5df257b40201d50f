"""The cross-file scan hands the summaries of the files with a top-level class to helper processes
(``CrossCallScan._queue``); those find the files' called names too, and the parent finds the others' meanwhile.
Whatever the pool does (answers, or fails chunk by chunk), the records and every file's called names are the
ones the scan finds alone."""

from __future__ import annotations

import pickle
import textwrap
from concurrent.futures import Future
from pathlib import Path

from mpfix.project.crosscalls import _CHUNKS, scan_project

LAYER = textwrap.dedent("""
    import tensorflow as tf

    from pkg import utils


    class Block{n}(tf.keras.layers.Layer):
        def call(self, x):
            return utils.act{n}(x * 2.0)


    def build{n}(k):
        block = Block{n}()
        return utils.apply(block, k)
""").lstrip("\n")


def _project(tmp_path: Path) -> tuple[Path, tuple[Path, ...]]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    files = {"__init__.py": "", "notes.py": "def helper(x):\n    return print(x)\n"}
    utils = ["import tensorflow as tf\n"]
    for n in range(_CHUNKS + 2):  # enough files with a class for the scan to queue them
        files[f"layer{n}.py"] = LAYER.format(n=n)
        utils.append(f"\n\ndef act{n}(features):\n    return tf.nn.relu(features)\n")
    files["utils.py"] = "".join(utils) + "\n\ndef apply(model, k):\n    return model(k)\n"
    for name, text in files.items():
        (pkg / name).write_text(text)
    return tmp_path, tuple(sorted(pkg / name for name in files))


class _Pool:
    """Runs each task at once, its arguments and answer pickled as a process pool would (``fail``: every
    future raises, as for a helper that died)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.tasks = fail, 0

    def submit(self, fn, *args):
        self.tasks += 1
        future: Future = Future()
        if self.fail:
            future.set_exception(RuntimeError("a helper died"))
        else:
            future.set_result(pickle.loads(pickle.dumps(fn(*pickle.loads(pickle.dumps(args))))))
        return future


def _outcome(root: Path, files, pool) -> tuple:
    found, scan = scan_project(root, files, pool=pool)
    return found, {str(f): scan.called_names(str(f)) for f in files}


def test_helpers_and_failed_helpers_give_the_scan_s_own_records_and_called_names(tmp_path: Path):
    root, files = _project(tmp_path)
    alone = _outcome(root, files, None)
    layer0 = str(root / "pkg" / "utils.py")
    assert any(call.function == "act0" for call in alone[0][layer0])  # a float16 call from Block0.call
    assert alone[1][str(root / "pkg" / "layer0.py")] >= {"Block0", "act0", "apply"}
    assert alone[1][str(root / "pkg" / "notes.py")] == frozenset({"helper", "print"})
    helped = _Pool()
    assert _outcome(root, files, helped) == alone and helped.tasks > 0
    failed = _Pool(fail=True)
    assert _outcome(root, files, failed) == alone and failed.tasks > 0
