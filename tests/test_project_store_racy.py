"""The project facts kept between runs (``mpfix.project.store``) after an edit their stamps could miss.

Before turn 19 the stores rested on each file's size and mtime only: an edit that kept both (a second save in the
same timestamp tick, at the same size; a tool that restores mtime) left the stored reach in place, and the next warm
``check`` reported from facts of the old text. Now ctime and inode are in the stamp, and a file changed too recently
for them to tell a later edit apart is stamped by its content too (git's "racily clean" entries)."""

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


def test_a_file_changed_just_now_is_stamped_by_its_content_too(tmp_path: Path, monkeypatch):
    """Two same-size writes within one timestamp tick leave size, mtime, ctime and inode as they were: for a file
    changed in the last ``RACY_NS`` the stamp holds its content's digest (git's racily clean entries)."""
    root = _project(tmp_path)
    files = sorted(root.glob("*.py"))
    stats = {str(p): p.stat() for p in files}
    real = os.stat
    # Every later write lands in the same tick: os.stat keeps answering what it answered before it.
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stats.get(str(path)) or real(path, *a, **k))
    first = store.fingerprint(root, files)
    (root / "train.py").write_text(TRAIN.replace("from blocks import", "from others import"))
    assert first is not None and store.fingerprint(root, files) != first
    monkeypatch.setattr(store, "RACY_NS", -10**18)  # control: stamps trusted, the same-tick write is not seen
    settled = store.fingerprint(root, files)
    (root / "train.py").write_text(TRAIN)
    assert store.fingerprint(root, files) == settled


def test_a_store_written_just_after_an_edit_is_used_until_the_content_changes(tmp_path: Path):
    root = _project(tmp_path)
    first = _check(root)  # the files were written a moment ago
    assert first.returncode == 1 and "MP206" in first.stdout
    assert _stores(root) == ["reach"]
    again = _check(root)
    assert again.stdout == first.stdout
