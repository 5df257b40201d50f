"""Turn 14's runtime held-out scripts (tests/verify/scripts/heldout14/: float16 failures no static rule sees, found
only by running them) and the classes they showed in ``repair``:

* an op a Keras 3 *model* built itself (Functional casts a layer's float32 output to the next layer's float16 compute
  dtype as it calls that layer) goes to the layer it feeds, not to the model: a model's ``dtype`` does not reach the
  layers inside it (dcn_cross_k3: a cross layer's output island, then the next cross layer's input cast).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mpfix.verify.candidates import at_finding
from mpfix.verify.evidence import Kind, RuntimeFinding
from verify_helpers import repair_copy

HELDOUT = Path(__file__).parent / "scripts" / "heldout14"

CROSS = {"name": "cross_1", "class": "Cross", "file": "/w/train.py", "line": 3, "code": "x2 = Cross()([inputs, x1])"}
MODEL = {"name": "functional", "class": "Functional", "file": "/w/train.py", "line": 4,
         "code": "model = keras.Model(inputs, output)", "model": True}
NORM = {"name": "layer_normalization", "class": "LayerNormalization", "file": "/w/train.py", "line": 2,
        "code": "norm = keras.layers.LayerNormalization()"}
TEXT = "import keras\nnorm = keras.layers.LayerNormalization()\nx2 = Cross()([inputs, x1])\nmodel = keras.Model(inputs, output)\n"


def _cast(layer, owner) -> RuntimeFinding:
    return RuntimeFinding("MP901", "float16 `Cast` gave inf/NaN from finite inputs at step 0", "/w/train.py",
                          layer["line"], 1, Kind.NONFINITE, "Cast", step=0, layer=layer, owner=owner)


def test_an_op_a_model_built_goes_to_the_layer_it_feeds():
    changes = at_finding(_cast(MODEL, CROSS), Path("/w/train.py"), TEXT, "mixed_float16")
    assert [(c.kind.value, c.line, c.class_name) for c in changes] == [("float32 layer", 3, "Cross")], changes


def test_an_op_a_library_layer_built_stays_that_layers():
    changes = at_finding(_cast(NORM, NORM), Path("/w/train.py"), TEXT, "mixed_float16")
    assert [(c.line, c.class_name) for c in changes] == [(2, "LayerNormalization")], changes
    # A model with no inner layer to name keeps the model (nothing better is known).
    assert [c.line for c in at_finding(_cast(MODEL, None), Path("/w/train.py"), TEXT, "mixed_float16")] == [4]


def _repair(tmp_path: Path, name: str, steps: int = 4) -> tuple[subprocess.CompletedProcess, dict, str]:
    run = repair_copy(tmp_path, HELDOUT / name, steps=steps)
    return run.result, run.report, run.after


@pytest.mark.slow
def test_repair_keeps_a_float32_value_float32_into_the_layers_it_feeds(tmp_path):
    result, data, after = _repair(tmp_path, "dcn_cross_k3.py")
    assert result.returncode == 0 and "dcn_cross_k3.py: non-finite -> healthy" in result.stdout, result.stdout
    kept = [(c["kind"], c["line"]) for c in data["changes"]]
    assert ("float32 island", 22) in kept and ("float32 layer", 31) in kept, kept
    assert "x2 = Cross(dtype=\"float32\")([inputs, x1])" in after, after


MEAN_AGGREGATE = '''import tensorflow as tf


class MeanAggregate(tf.keras.layers.Layer):
    def call(self, messages):
        summed = tf.math.reduce_sum(messages, axis=1)
        mean = summed / tf.cast(tf.shape(messages)[1], summed.dtype)
        return self.update(mean)
'''


def test_an_island_reaches_the_division_that_reads_the_sums_dtype_too():
    """gnn_segment_sum_k2's shape: `mean = summed / tf.cast(count, summed.dtype)`. The dtype read follows the island
    (float32 there as well), so the sum stays float32 until the division, and the cast back follows it."""
    from mpfix.verify import islands

    out = islands.float32_island(MEAN_AGGREGATE, 6, 18, "Sum")
    assert out is not None
    assert "summed = tf.math.reduce_sum(tf.cast(messages, tf.float32), axis=1)" in out, out
    assert "mean = tf.cast(summed / tf.cast(tf.cast(tf.shape(messages)[1], summed.dtype), tf.float32), " \
           "self.compute_dtype)" in out, out
    # A second read of the value elsewhere still leaves the island alone (cast back right after the sum).
    other = MEAN_AGGREGATE.replace("        return self.update(mean)", "        return self.update(mean + summed)")
    assert "mean = summed / tf.cast" in islands.float32_island(other, 6, 18, "Sum")


def test_an_island_goes_inside_a_segment_sum_and_leaves_its_segment_ids_alone():
    """gnn_segment_sum_k2.py itself: the float16 segment sum over a hub's 3000 in-edges overflows; the messages are
    cast inside the call (not its inf result), the ids stay int, the cast back follows the division by the degree."""
    from mpfix.verify import islands

    text = (HELDOUT / "gnn_segment_sum_k2.py").read_text()
    out = islands.float32_island(text, 33, 18, "UnsortedSegmentSum")
    assert out is not None
    assert "summed = tf.math.unsorted_segment_sum(tf.cast(messages, tf.float32), dst, N_NODES)" in out, out
    assert "mean = tf.cast(summed / tf.cast(tf.cast(tf.maximum(degree, 1.0), summed.dtype), tf.float32), " \
           "self.compute_dtype)" in out, out
