"""``mpfix instrument`` reads the script as Python does (PEP 263 coding line, UTF-8 BOM) and writes
the instrumented copy in the script's own encoding, BOM and newlines.

Before, it decoded UTF-8 only: a latin-1 script with a coding line got "cannot read" (exit 2), and a
copy was always written as UTF-8 (wrong under the coding line the copy keeps).
"""

from __future__ import annotations

import codecs
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from mpfix.verify.instrument import instrument

STEP = '''\
import tensorflow as tf

# Réglages : pas d'échelle de perte (loss scale) ici.
opt = tf.keras.optimizers.SGD()


@tf.function
def train_step(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)  # « perte »
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss
'''


def _instrumented(tmp_path: Path, data: bytes) -> bytes:
    script = tmp_path / "train.py"
    script.write_bytes(data)
    out = tmp_path / "copy.py"
    result = CliRunner().invoke(instrument, [str(script), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_bytes()


def test_latin1_script_with_a_coding_line_is_instrumented_in_latin1(tmp_path: Path):
    text = "# -*- coding: latin-1 -*-\n" + STEP
    copy = _instrumented(tmp_path, text.encode("latin-1"))
    assert "Réglages".encode("latin-1") in copy and "Réglages".encode("utf-8") not in copy
    decoded = copy.decode("latin-1")
    assert decoded.startswith("# -*- coding: latin-1 -*-\n")
    assert 'tf.debugging.check_numerics(loss, "loss")' in decoded
    compile(copy, "copy.py", "exec")  # Python reads the bytes through the coding line
    # The diff (default mode) shows the script's text, decoded through its coding line.
    script = tmp_path / "train.py"
    done = subprocess.run([sys.executable, "-m", "mpfix", "instrument", str(script)], capture_output=True,
                          text=True, encoding="utf-8", env={"PYTHONIOENCODING": "utf-8", "PATH": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "+        loss = tf.debugging.check_numerics(loss" in done.stdout


def test_bom_and_crlf_survive(tmp_path: Path):
    data = codecs.BOM_UTF8 + STEP.replace("\n", "\r\n").encode("utf-8")
    copy = _instrumented(tmp_path, data)
    assert copy.startswith(codecs.BOM_UTF8) and not copy.startswith(codecs.BOM_UTF8 * 2)
    body = copy[len(codecs.BOM_UTF8):]
    assert b"\n" not in body.replace(b"\r\n", b"")  # every line keeps CRLF
    assert b"check_numerics" in body
    compile(copy, "copy.py", "exec")


def test_undecodable_bytes_are_a_path_line_error(tmp_path: Path):
    script = tmp_path / "bad.py"
    script.write_bytes(b"import tensorflow as tf\nx = '\xff'\n")
    result = CliRunner().invoke(instrument, [str(script)])
    assert result.exit_code == 2
    assert result.output.startswith(f"{script}:2:6: error: cannot read: cannot decode as utf-8")


def test_the_copy_is_never_written_through_a_fifo_a_link_or_into_a_missing_folder(tmp_path: Path):
    """A FIFO at ``<name>_instrumented.py`` made ``--write`` block forever; a symbolic link there was
    written through (outside the project); a missing folder for ``-o`` was a traceback."""
    import os

    script = tmp_path / "train.py"
    script.write_text(STEP)
    script.chmod(0o750)
    copy = tmp_path / "train_instrumented.py"
    os.mkfifo(copy)
    done = subprocess.run([sys.executable, "-m", "mpfix", "instrument", "--write", str(script)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "FIFO" in done.stderr and "Traceback" not in done.stderr, done.stderr
    copy.unlink()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    copy.symlink_to(outside)
    result = CliRunner().invoke(instrument, ["--write", str(script)])
    assert result.exit_code == 2 and "symbolic link" in result.output
    assert outside.read_text() == "keep me\n" and copy.is_symlink()
    result = CliRunner().invoke(instrument, [str(script), "-o", str(tmp_path / "missing" / "x.py")])
    assert result.exit_code == 2 and "cannot write" in result.output
    copy.unlink()
    result = CliRunner().invoke(instrument, ["--write", str(script)])
    assert result.exit_code == 0 and copy.is_file() and not copy.is_symlink()
    assert (copy.stat().st_mode & 0o777) == 0o750 and b"check_numerics" in copy.read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".mpfix-tmp")] == []


def test_the_script_itself_is_never_the_copy(tmp_path: Path):
    """``-o SCRIPT`` (or a hard link to it) replaced the original, which instrument promises never to modify."""
    import os

    script = tmp_path / "train.py"
    script.write_text(STEP)
    os.link(script, tmp_path / "same.py")
    for target in (script, tmp_path / "same.py", Path(os.path.relpath(script))):
        result = CliRunner().invoke(instrument, [str(script), "-o", str(target)])
        assert result.exit_code == 2 and "SCRIPT itself" in result.output, result.output
    assert script.read_text() == STEP
