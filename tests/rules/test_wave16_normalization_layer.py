"""Wave 16 of ``benchmarks/unseen`` (turn 20, scored untuned): adapt_norm_raw_k3.py adapts a Keras 3
``Normalization`` layer on raw tabular columns (incomes ~70000, annual kWh ~9000) as the model's first layer under
mixed_float16. Both generations cast the layer's input and its mean/variance to float16 (the sources:
``ops.cast(..., self.compute_dtype)``), so incomes past 65504 and every variance past 65504 were inf and the loss
NaN from epoch 1; ``dtype="float32"`` trained (0.83 -> 0.08). mpfix said nothing: the layer table listed
Normalization only as a layer that does not autocast. The fact now in ``keras_layers``: ``raw_statistics``.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import lint_snippet

K3 = """
    import keras
    import numpy as np

    keras.mixed_precision.set_global_policy("{policy}")


    def build(train_x):
        norm = keras.layers.Normalization({args})
        norm.adapt(train_x)
        raw = keras.Input((6,))
        h = keras.layers.Dense(64, activation="relu")(norm(raw))
        return keras.Model(raw, keras.layers.Dense(1, dtype="float32")(h))
"""

K2 = """
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Tabular(keras.Model):
        def __init__(self, mean, variance):
            super().__init__()
            self.norm = keras.layers.Normalization({args})
            self.head = keras.layers.Dense(1, dtype="float32")

        def call(self, x):
            return self.head(self.norm(x))
"""


def mp210(template: str, keras: str, **fields) -> list[int]:
    code = template.format(**fields)
    compile(textwrap.dedent(code).lstrip("\n"), "train.py", "exec")
    return [f.line for f in lint_snippet(code, ("MP210",), keras=keras, filename="train.py").findings]


def test_adapted_normalization_in_float16_is_reported():
    assert mp210(K3, "3", policy="mixed_float16", args="") == [8]
    assert mp210(K3, "3", policy="mixed_float16", args='axis=-1, dtype="mixed_float16"') == [8]


def test_tf_keras_normalization_given_its_statistics_is_reported():
    assert mp210(K2, "2", args="mean=mean, variance=variance") == [12]
    assert mp210(K2, "2", args="-1, mean, variance") == [12]


def test_controls_stay_silent():
    assert mp210(K3, "3", policy="mixed_float16", args='dtype="float32"') == []
    assert mp210(K3, "3", policy="mixed_bfloat16", args="") == []
    assert mp210(K3, "3", policy="float32", args="") == []
    # never adapted and given no statistics: mean 0, variance 1 (wave 5's audio_logmel_k3)
    assert mp210(K2, "2", args="axis=-1") == []


def test_literal_statistics_of_small_data_stay_silent():
    # keras.applications' ConvNeXt PreStem: ImageNet statistics of 0-255 pixels (variance <= 3400), fine in float16
    imagenet = "mean=[0.485 * 255, 0.456 * 255, 0.406 * 255], variance=[(0.229 * 255) ** 2, (0.224 * 255) ** 2, 0.05]"
    assert mp210(K2, "2", args=imagenet) == []
    assert mp210(K2, "2", args="mean=[0.485, 0.456], variance=[0.229**2, 0.224**2]") == []
    # bound to names once in the module (keras.applications.EfficientNetV2)
    named = K2.replace("import tf_keras as keras\n", "import tf_keras as keras\n    mean = [0.485, 0.456]\n"
                                                    "    variance = [0.229**2, 0.224**2]\n")
    assert mp210(named, "2", args="mean=mean, variance=variance") == []
    # literal statistics of raw data (incomes: mean 70000) or a variance past 65504 are reported
    assert mp210(K2, "2", args="mean=[70000.0], variance=[4e8]") == [12]
    assert mp210(K2, "2", args="mean=[9000.0], variance=[2e7]") == [12]


def test_test_code_is_left_alone():
    # Keras' own normalization_test.py adapts the layer on toy data (31 findings in the stress guard at 0c6cb02)
    code = K3.format(policy="mixed_float16", args="")
    assert [f.line for f in lint_snippet(code, ("MP210",), keras="3", filename="normalization_test.py").findings] == []
