"""``mpfix verify`` on scripts that fight back (turn 8 audit; real TensorFlow, so ``slow``): one that
trains and then never ends, ignores SIGTERM and leaves a grandchild in its own session; one that
closes its stdout and stderr, deletes itself, leaves its folder and prints megabytes. verify ends
with a clear verdict within its budget and leaves no process behind. (Audited in turn 8: all
of these already held; these tests keep them.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRAIN = """
import numpy as np
import tensorflow as tf
def train(epochs, callbacks=()):
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.rand(64, 4).astype("float32"); y = np.random.rand(64, 1).astype("float32")
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=list(callbacks))
"""


def _alive_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _verify(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", "verify", "--no-baseline", *args, str(script)],
                          capture_output=True, text=True, timeout=600, cwd=script.parent)


def test_a_script_that_never_ends_ignores_sigterm_and_forks_away_is_a_timeout_with_nothing_left(tmp_path: Path):
    script = tmp_path / "stubborn_train.py"
    script.write_text("import os, signal, time\n" + TRAIN + """
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    time.sleep(900)
    os._exit(0)
train(epochs=100000)
""")
    done = _verify(script, "--steps", "100000", "--timeout", "60")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 15 and "TIMEOUT" in done.stdout, done.stdout + done.stderr[-3000:]
    for _ in range(50):  # the kill is sent before verify returns; the kernel may take a moment to reap
        left = _alive_with(str(script))
        if not left:
            break
        time.sleep(0.2)
    else:
        for pid in left:
            os.kill(pid, 9)
        pytest.fail(f"processes left behind: {left}")


def test_a_script_that_closes_its_output_deletes_itself_and_moves_away_gets_its_verdict(tmp_path: Path):
    script = tmp_path / "vanishing_train.py"
    script.write_text("import os, sys\n" + TRAIN + """
import tensorflow as tf
class Loud(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        sys.stdout.write("y" * 2_000_000 + "\\n")
        sys.stdout.flush()
os.remove(os.path.abspath(__file__))
os.chdir("/")
train(epochs=1, callbacks=[Loud()])
os.close(1)
os.close(2)
train(epochs=1)
""")
    done = _verify(script, "--steps", "12", "--timeout", "300")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0 and "HEALTHY" in done.stdout and "12 steps" in done.stdout, done.stdout[-3000:]
