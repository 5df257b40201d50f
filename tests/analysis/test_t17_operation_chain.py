"""keras.ops' own Operation classes run `call` on whatever the caller passes (no autocast, no compute dtype): their
`call` is no float16 region, whether the class names `Operation` as its base or reaches it through a class of the same
file (Keras' `class SegmentSum(SegmentReduction)` over `class SegmentReduction(Operation)`, keras/src/ops/math.py: a
false MP203 in the keras corpus once segment sums became data-length sums, turn 17 guard g3)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP2 = tuple(r for r in all_rules() if r.code.startswith("MP2"))

CODE = """
    import keras
    import tensorflow as tf
    from keras.src.ops.operation import Operation

    keras.mixed_precision.set_global_policy("mixed_float16")


    class SegmentReduction({base}):
        def __init__(self, num_segments=None, **kwargs):
            super().__init__(**kwargs)
            self.num_segments = num_segments


    class SegmentSum(SegmentReduction):
        def call(self, data, segment_ids):
            return tf.math.unsorted_segment_sum(data, segment_ids, self.num_segments)
"""


def _found(base: str) -> list[tuple[str, int]]:
    code = textwrap.dedent(CODE.format(base=base)).lstrip("\n")
    result = Engine(MP2, Options(keras="3", project_policy=False)).lint(code, Path("ops.py"))
    return sorted((f.code, f.line) for f in result.findings)


def test_an_operation_reached_through_a_class_of_the_file_is_no_float16_region():
    assert _found("Operation") == []


@pytest.mark.parametrize("base", ["keras.layers.Layer", "tf.keras.layers.Layer"])
def test_the_same_chain_over_a_layer_still_reports_the_float16_segment_sum(base):
    assert _found(base) == [("MP203", 16)]
