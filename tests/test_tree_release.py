"""A file's syntax tree is freed when its lint returns, not left to the cyclic collector.

A rule run ties the tree into reference cycles (analyses hold ``context.resolve``, reports hold
their rule, a recursive closure of the region finder holds every function and class). Cyclic
garbage that big is found only by later collections, each of which scans it again: on tf-models
that was 7M nodes and ~6% of a cold check. ``engine._release`` and the unbound closure make
refcounting free the tree at once; this test counts what is left for the collector.
"""

from __future__ import annotations

import gc
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _left_for_the_collector(engine: Engine, path: Path) -> int:
    text = path.read_text(encoding="utf-8")
    engine.lint(text, path)  # imports, rule tables and other one-time caches
    gc.collect()
    gc.disable()
    try:
        result = engine.lint(text, path)
        return gc.collect()
    finally:
        gc.enable()
        assert result.findings  # the rules ran (float16 analyses included)


def test_a_linted_tree_is_freed_without_the_cyclic_collector():
    engine = Engine(tuple(all_rules()), Options(policy="mixed_float16"))
    for name in ("attention_mask_1e9.py", "tf24_era_training.py"):
        # Before: the whole tree (thousands of nodes per sample) was unreachable cyclic garbage.
        assert _left_for_the_collector(engine, SAMPLES / name) < 300, name
