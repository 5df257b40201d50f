"""Turn 14 fuzz round, coding lines: a codec whose decoding fails with a plain UnicodeError (``punycode``,
``undefined``), not a UnicodeDecodeError, was "internal error in mpfix (UnicodeError ...); please report it".
CPython refuses these files too; now it is a clear MP000 and the run goes on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = b"import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"


@pytest.mark.parametrize("codec", ["punycode", "undefined"])
@pytest.mark.parametrize("command", ["check", "apply"])
def test_a_coding_line_whose_codec_fails_to_decode_is_a_clear_error(tmp_path: Path, codec: str, command: str):
    (tmp_path / "odd.py").write_bytes(b"# coding: " + codec.encode() + b"\n" + SOURCE)
    (tmp_path / "fine.py").write_bytes(SOURCE)
    result = subprocess.run([sys.executable, "-m", "mpfix", command, "--no-cache", "."], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2
    assert f"odd.py:1:1: MP000 cannot decode as {codec}:" in result.stdout
    assert "internal error" not in result.stdout + result.stderr
    if command == "check":
        assert "fine.py:4:14: MP306" in result.stdout  # the run went on
    else:
        assert b"reduce_retracing" in (tmp_path / "fine.py").read_bytes()
        assert (tmp_path / "odd.py").read_bytes().endswith(SOURCE)
