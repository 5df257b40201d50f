"""Prefilters that keep files from being parsed must be necessary conditions of a finding, never guesses.

MP205 reports only an output layer (``model_outputs._OUTPUT_LAYERS``, the layer table's output heads: the last
part of what the import table resolves the layer's callee to), so a file that spells none of those class names
cannot get an MP205 finding and is not parsed for it (tf-models: 24 of the 369 files LibCST parsed had no other
rule).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix import api
from mpfix.codemods import all_rules
from mpfix.codemods.analysis.model_outputs import _OUTPUT_LAYERS as OUTPUT_LAYERS  # the rule's own table

MP205 = next(r for r in all_rules() if r.code == "MP205")

HEAD = textwrap.dedent("""
    import tensorflow as tf
    from tensorflow.keras.layers import {name} as Head
    tf.keras.mixed_precision.set_global_policy("mixed_float16")

    inputs = tf.keras.Input((8,))
    outputs = Head(10, activation="softmax")(tf.keras.layers.ReLU()(inputs))
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
""")


def test_the_gate_is_the_table():
    assert MP205.also_requires == (tuple(sorted(OUTPUT_LAYERS)),)


def _mp205(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(text)
    return [f.code for f in api.check_paths([path], select=("MP205",))]


def test_a_model_without_an_output_layer_name_is_not_parsed_for_mp205(tmp_path: Path):
    text = HEAD.format(name="Dense").replace("Dense", "Lambda")
    assert not MP205.may_match(text)
    assert _mp205(tmp_path, text) == []


def test_an_aliased_output_layer_still_counts(tmp_path: Path):
    text = HEAD.format(name="Dense")
    assert "Dense(" not in text and MP205.may_match(text)  # only the import spells it
    assert _mp205(tmp_path, text) == ["MP205"]


def test_every_example_of_the_rule_passes_the_gate():
    assert all(MP205.may_match(textwrap.dedent(example.code)) for example in MP205.INVALID)
