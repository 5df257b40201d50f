"""Turn 14 fuzz round, the walk: a folder that can be listed but not searched (mode r--, or /proc/1 as any
user) made the virtualenv test's ``stat`` of ``<folder>/pyvenv.cfg`` raise PermissionError out of discovery:
``mpfix check /proc/1`` and an editor whose workspace was ``/`` ended in a traceback. Run as root the tests
cannot take the permission away, so ``stat`` refuses it here the way the kernel does."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from mpfix.cli import main

DEPRECATED = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"


def test_a_folder_that_cannot_be_searched_is_no_traceback_and_the_rest_is_checked(tmp_path: Path, monkeypatch):
    (tmp_path / "unsearchable").mkdir()
    (tmp_path / "open.py").write_text(DEPRECATED)
    real = os.stat

    def stat(path, *args, **kwargs):
        if Path(path).parent.name == "unsearchable":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--jobs", "1", "."])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    assert "open.py:4:14: MP306" in result.output
