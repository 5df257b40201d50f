"""Turn 6: MP2 false positives on the old corpora and in-file misses on issue 18's new corpora.

Compiled losses: a Keras 2 ``Loss`` subclass whose file calls its compiled losses itself (``self.loss.get(k)``,
``self.loss[k]`` in an overridden ``train_step``) sees what those calls pass (dle EfficientDet
``utils/train_lib.py:147``: the class/box outputs are cast to float32 before the focal loss).
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])


def found(code: str, keras: int = 3) -> list[tuple[str, int]]:
    result = lint_snippet(code, "MP2", keras=keras, policy="mixed_float16", fix=False, filename="train_lib.py")
    return sorted((f.code, f.line) for f in result.findings)


# -- compiled losses called by the file's own train_step -------------------------------------------------
FOCAL = """
    import tensorflow as tf

    class StableFocalLoss(tf.keras.losses.Loss):
        def __init__(self, gamma, **kwargs):
            super().__init__(**kwargs)
            self.gamma = gamma

        def call(self, y, y_pred):
            normalizer, y_true = y
            negative_pred = -1.0 * y_pred
            modulator = tf.exp(self.gamma * y_true * negative_pred - self.gamma * tf.math.log1p(tf.exp(negative_pred)))
            return modulator / normalizer

    class DetectorTrain(tf.keras.Model):
        def _detection_loss(self, cls_outputs, labels):
            cls_outputs = [tf.cast(i, tf.float32) for i in cls_outputs]
            losses = []
            for level in range(3):
                class_loss_layer = self.loss.get({key}, None)
                if class_loss_layer:
                    losses.append(class_loss_layer([1.0, labels[level]], {outputs}[level]))
            return tf.add_n(losses)

        def train_step(self, data):
            images, labels = data
            with tf.GradientTape() as tape:
                cls_outputs = self(images, training=True)
                loss = self._detection_loss(cls_outputs, labels)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {{"loss": loss}}
"""
SOFTPLUS_LINE = 11


@pytest.mark.parametrize("key", ["'class_loss'", "StableFocalLoss.__name__"])
def test_a_loss_its_file_calls_on_float32_outputs_computes_in_float32(key):
    # Keras 2 does not convert a Loss's inputs: y_pred is what the file's train_step passes, float32 here.
    assert found(FOCAL.format(key=key, outputs="cls_outputs"), keras=2) == []


@pytest.mark.parametrize("key", ["'class_loss'", "StableFocalLoss.__name__"])
def test_a_loss_its_file_calls_on_float16_outputs_still_overflows(key):
    # Same loss, called on the model's raw float16 outputs (`self(images)` in a mixed model): still reported.
    code = FOCAL.format(key=key, outputs="labels").replace("labels[level]], labels[level]", "labels[level]], x[level]")
    code = code.replace("cls_outputs = [tf.cast(i, tf.float32) for i in cls_outputs]", "x = cls_outputs")
    assert ("MP204", SOFTPLUS_LINE) in found(code, keras=2)


def test_a_loss_class_no_call_of_the_file_reaches_keeps_float16_inputs():
    # Without the file's own train_step calling it, the compiled loss gets the model's outputs: float16.
    code = FOCAL.format(key="'class_loss'", outputs="cls_outputs").split("    class DetectorTrain")[0]
    assert found(code, keras=2) == [("MP204", SOFTPLUS_LINE)]


def test_keras3_converts_a_loss_s_inputs_to_float32_either_way():
    assert found(FOCAL.format(key="'class_loss'", outputs="cls_outputs"), keras=3) == []
