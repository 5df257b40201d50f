"""The cross-file scan reads each file into a small summary (``mpfix.project.crosscall_summary``) and keeps no
syntax tree: tf-models + keras (bench_check's project) peaked at ~410 MB with every tree kept, ~110 MB now."""

from __future__ import annotations

import ast
import gc
import textwrap
from pathlib import Path

from mpfix.project.crosscall_records import ArgKind, CallContext
from mpfix.project.crosscall_summary import Ref
from mpfix.project.crosscalls import CrossCallScan, scan_project
from mpfix.project.structural import StructuralSummary

BASE = "import tensorflow as tf\n\n\nclass BaseBlock(tf.keras.layers.Layer):\n    pass\n"
LAYERS = textwrap.dedent("""
    import tensorflow as tf

    from pkg import utils
    from pkg.base import BaseBlock


    class Block(BaseBlock):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def call(self, x):
            y = x * self.scale
            return utils.act(y, rate=0.5)


    def build(n):
        block = Block()
        return utils.apply(block, n)
""").lstrip("\n")
UTILS = textwrap.dedent("""
    import tensorflow as tf


    def act(features, rate=1.0):
        return tf.nn.relu(features) * rate


    def apply(model, n):
        return model.scale * n
""").lstrip("\n")


def _project(tmp_path: Path) -> tuple[Path, tuple[Path, ...]]:
    (tmp_path / "pkg").mkdir()
    files = {"pkg/__init__.py": "", "pkg/base.py": BASE, "pkg/layers.py": LAYERS, "pkg/utils.py": UTILS}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path, tuple(sorted(tmp_path / name for name in files))


def _live_statements() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, ast.stmt))


def test_summaries_keep_no_syntax_tree(tmp_path: Path):
    root, files = _project(tmp_path)
    before = _live_statements()
    scan = CrossCallScan(root, files)
    summaries = [scan._file(str(f)) for f in files]
    assert all(s is not None for s in summaries)
    assert _live_statements() == before  # no def/class/statement node outlives its file's pass
    layers = scan.summaries[str(root / "pkg" / "layers.py")]
    block = layers.classes["Block"]
    assert block.bases == (Ref(None, "pkg.base.BaseBlock"),)
    assert block.reached_from_call == frozenset({"call"})
    assert layers.functions["build"].params == ("n",)
    assert scan.summaries[str(root / "pkg" / "utils.py")].functions["act"].params == ("features", "rate")


def test_the_summaries_answer_as_the_trees_did(tmp_path: Path):
    root, files = _project(tmp_path)
    found, scan = scan_project(root, files)
    utils = {c.function: c for c in found[str(root / "pkg" / "utils.py")]}
    assert utils["act"].context is CallContext.LAYER_CALL
    assert dict(utils["act"].args) == {"features": ArgKind.TENSOR, "rate": ArgKind.NUMBER}
    assert utils["apply"].keras_instances == frozenset({"model"})
    assert scan.keras_class(root / "pkg" / "layers.py", "Block")  # through the project base in base.py
    assert not scan.keras_class(root / "pkg" / "layers.py", "build")
    assert isinstance(scan.structural_of(root / "pkg" / "utils.py"), StructuralSummary)
