"""Turn 14 fuzz round: editor buffers the CLI can never read. An LSP client sends JSON, and JSON may escape
half of a UTF-16 pair ("\\ud800"); a file on disk cannot hold one (strict UTF-8), a notebook cell is refused
with a clear error (``mpfix.notebooks``). Before, a buffer holding one was an "internal error ... please
report it" diagnostic (the reach scan encoded the text)."""

from __future__ import annotations

from pathlib import Path

from mpfix import api

BUFFER = (
    "import tensorflow as tf\n"
    "from tensorflow import keras\n"
    "\n"
    "keras.mixed_precision.set_global_policy('mixed_float16')\n"
    "label = '\ud800'\n"
    "model = keras.Sequential([keras.layers.Dense(10), keras.layers.Activation('softmax')])\n"
)


def test_a_lone_surrogate_in_a_buffer_is_a_clear_error_at_its_place(tmp_path: Path):
    result = api.lint_text(BUFFER, tmp_path / "a.py")
    assert result.findings == []
    [error] = result.errors
    assert (error.line, error.column) == (5, 10)
    assert "lone surrogate (\\ud800)" in error.message
    assert "internal error" not in error.message


def test_fixing_a_buffer_with_a_lone_surrogate_writes_nothing(tmp_path: Path):
    result = api.lint_text(BUFFER, tmp_path / "a.py", fix=True, unsafe_fixes=True)
    assert result.fixed_text is None
    assert [e.line for e in result.errors] == [5]
