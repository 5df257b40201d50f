"""A small, fast sample of benchmarks/fuzz_hostile.py (issue 21): generated programs and mutated real
files through the real command line; no crash, traceback or hang. The full run (1,000 of each) is
``python benchmarks/fuzz_hostile.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
fuzz_hostile = importlib.import_module("fuzz_hostile")


def _check(name: str, inputs: list[bytes]) -> None:
    outcome = fuzz_hostile.Outcome(inputs=len(inputs))
    fuzz_hostile.run_batch(inputs, [f"{name}-{i}" for i in range(len(inputs))], outcome, timeout_per_file=5.0)
    assert (outcome.crashes, outcome.tracebacks, outcome.hangs) == ([], [], []), outcome.line(name)


def test_mutated_real_files():
    inputs = fuzz_hostile.mutated(12, seed=4)
    assert len(inputs) == 12 and len(set(inputs)) > 10
    _check("mutated", inputs)


def test_the_mutations_include_what_crashed_libcst():
    import random

    rng = random.Random(0)
    seen = {fuzz_hostile.mutate(b"x = 1\n", rng)[:20] for _ in range(300)}
    assert any(s.startswith(b"x = (((") for s in seen)


@pytest.mark.slow  # 24 s under load, the not-slow suite's longest test
@pytest.mark.skipif(importlib.util.find_spec("hypothesmith") is None, reason="hypothesmith not installed")
def test_generated_programs():
    _check("generated", fuzz_hostile.generated(12, seed=4))


def test_the_verify_side_probe_passes_mutated_and_deeply_nested_files(monkeypatch):
    # The verify/repair/instrument side (no TensorFlow) on the same inputs: no crash, traceback or hang.
    monkeypatch.setattr(fuzz_hostile, "COMMANDS", [fuzz_hostile.VERIFY_SIDE])
    inputs = fuzz_hostile.mutated(6, seed=5) + [b"y = " + b"(" * 3000 + b"1" + b")" * 3000 + b"\n"]
    _check("mutated", inputs)


def test_coding_lines_reach_check_sarif_apply_and_the_verify_side(monkeypatch):
    # Every coding line the harness writes, behind the rule trigger, through all four commands.
    monkeypatch.setattr(fuzz_hostile, "COMMANDS", fuzz_hostile.COMMANDS + [fuzz_hostile.VERIFY_SIDE])
    body = fuzz_hostile.TRIGGER.encode() + "s = 'caf\u00e9'\n".encode("latin-1")
    inputs = [b"# -*- coding: " + codec + b" -*-\n" + body for codec in fuzz_hostile.CODINGS]
    _check("coding", inputs)
    import random
    rng = random.Random(1)
    assert any(fuzz_hostile.with_coding(b"x\n", rng).startswith(b"# -*- coding") for _ in range(100))


@pytest.mark.slow  # 16 s under load
def test_a_repeated_line_is_one_of_the_mutations_and_passes():
    import random

    rng = random.Random(3)
    grown = [fuzz_hostile.with_repeats(b"a = 1\nm.reset_states()\n", rng) for _ in range(64)]
    assert any(g.count(b"\n") > 3000 for g in grown)
    # The shape that hung target evidence (before 6a1aef9): many uses of reset_states, one binding.
    body = b"m = tf.keras.metrics.Mean()\n" + b"x.reset_states()\n" * 3000
    _check("repeats", [fuzz_hostile.TRIGGER.encode() + body])
