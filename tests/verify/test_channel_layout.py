"""The channel's row layout (``_channel.FIELDS``) matches what the recorder writes and reads.

Read from the sources with ``ast`` (both modules import TensorFlow): ``Recorder._write`` builds
``values`` (a row without ``optimizer`` and ``step``, which ``Channel.write`` prepends) and
``Recorder._record`` unpacks a row by name. A field added to one side only would shift every
later field of every step silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

VERIFY = Path(__file__).resolve().parents[2] / "mpfix" / "verify"


def _tuple(module: ast.Module, name: str) -> tuple:
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found")


def _method(module: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls}.{name} not found")


def test_recorder_writes_and_reads_rows_in_the_channels_layout():
    channel = ast.parse((VERIFY / "_channel.py").read_text(encoding="utf-8"))
    recorder = ast.parse((VERIFY / "_recorder.py").read_text(encoding="utf-8"))
    fields = _tuple(channel, "FIELDS")
    assert fields[:2] == ("optimizer", "step")
    # The comment above FIELDS names the functions that must follow it, where they are.
    source = (VERIFY / "_channel.py").read_text(encoding="utf-8")
    assert "``Recorder._write``" in source and "``Recorder._record``" in source and "in _recorder.py" in source

    record = _method(recorder, "Recorder", "_record")
    unpacked = next(node for node in ast.walk(record) if isinstance(node, ast.Assign)
                    and isinstance(node.targets[0], ast.Tuple) and len(node.targets[0].elts) > 5)
    names = tuple(e.id for e in unpacked.targets[0].elts)
    assert len(names) == len(fields)
    for name, field in zip(names, fields):  # ``seq`` for ``loss_seq``
        assert name == field or field.endswith("_" + name), (name, field)

    write = _method(recorder, "Recorder", "_write")
    values = next(node.value for node in ast.walk(write) if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "values" for t in node.targets))
    assert isinstance(values, ast.List) and len(values.elts) == len(fields) - 2
    # By name where the writer uses the field's own name (loss, elements, ...).
    for name, element in zip(fields[2:], values.elts):
        if isinstance(element, ast.Name) and element.id in fields:
            assert element.id == name
