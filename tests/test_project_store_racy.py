"""The project facts kept between runs (``mpfix.project.store``) after an edit their stamps could miss.

Before turn 19 the stores rested on each file's size and mtime only: an edit that kept both (a second save in the
same timestamp tick, at the same size; a tool that restores mtime) left the stored reach in place, and the next warm
``check`` reported from facts of the old text. Now ctime and inode are in the stamp, and nothing is stored while a
file's mtime is too recent to tell a later edit apart (git's "racily clean")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from mpfix.project import store

TRAIN = textwrap.dedent("""\
    import tensorflow as tf
    from tensorflow import keras

    from blocks import Scale

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([Scale(), keras.layers.Dense(1, dtype="float32")])
    """)
BLOCKS = textwrap.dedent("""\
    import tensorflow as tf
    from tensorflow import keras


    class Scale(keras.layers.Layer):
        def call(self, x):
            depth = tf.shape(x)[-1]
            return x / tf.math.sqrt(tf.cast(depth, tf.float32))
    """)


def _project(root: Path) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\ndependencies = ['tensorflow>=2.16']\n")
    (root / "train.py").write_text(TRAIN)
    (root / "blocks.py").write_text(BLOCKS)
    (root / "others.py").write_text(BLOCKS.replace("tf.float32", "x.dtype"))  # the same layer, right
    return root


def _settle(root: Path) -> None:
    """Files written long enough ago for their stamps to be trusted (``store.RACY_NS``; ctime cannot be set back)."""
    time.sleep(max(0.0, (max(p.stat().st_ctime_ns for p in root.iterdir()) + store.RACY_NS - time.time_ns()) / 1e9))


def _check(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(root / ".mpfix_cache"))
    return subprocess.run([sys.executable, "-m", "mpfix", "check", *argv, "."], cwd=root, capture_output=True,
                          text=True, timeout=300, env=env)


def _stores(root: Path) -> list[str]:
    return sorted(p.name.split("-")[0] for p in (root / ".mpfix_cache").rglob("reach-*.json"))


def test_an_edit_that_keeps_size_and_mtime_is_seen(tmp_path: Path):
    root = _project(tmp_path)
    _settle(root)
    first = _check(root)
    assert first.returncode == 1 and "blocks.py:8:20: MP206" in first.stdout, first.stdout + first.stderr
    assert _stores(root) == ["reach"]  # the reach is kept: train.py's policy reaches blocks.py, not others.py
    train = root / "train.py"
    before = train.stat()
    train.write_text(TRAIN.replace("from blocks import", "from others import"))  # float16 no longer reaches blocks
    os.utime(train, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same tick: size and mtime as they were
    assert (train.stat().st_size, train.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    fresh = _check(root, "--no-cache")
    assert fresh.returncode == 0 and "MP206" not in fresh.stdout, fresh.stdout  # blocks.py is not float16 now
    warm = _check(root)
    assert (warm.returncode, warm.stdout) == (fresh.returncode, fresh.stdout)


def test_nothing_is_stored_on_files_changed_just_now(tmp_path: Path):
    root = _project(tmp_path)
    first = _check(root)
    assert first.returncode == 1 and "MP206" in first.stdout
    assert _stores(root) == []  # written a moment ago: a second edit in the same tick could keep every stamp
    _settle(root)
    again = _check(root)
    assert again.stdout == first.stdout
    assert _stores(root) == ["reach"]
