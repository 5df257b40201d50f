"""tf_keras text classifier: a warm-up LearningRateSchedule and a Callback that logs the dynamic loss scale."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, peak, warmup, total):
        super().__init__()
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = self.peak * step / self.warmup
        progress = (step - self.warmup) / max(1, self.total - self.warmup)
        cosine = 0.5 * self.peak * (1.0 + tf.cos(np.pi * tf.minimum(progress, 1.0)))
        return tf.where(step < self.warmup, warm, cosine)

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


class LossScaleLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        optimizer = self.model.optimizer
        if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            print(f"epoch {epoch}: loss scale {float(optimizer.loss_scale):.0f}")


def build(vocab=2000, seq=40):
    tokens = keras.Input((seq,), dtype="int32")
    h = keras.layers.Embedding(vocab, 64)(tokens)
    h = keras.layers.Bidirectional(keras.layers.LSTM(32))(h)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    model = keras.Model(tokens, out)
    model.compile(optimizer=keras.optimizers.Adam(WarmupCosine(1e-3, 20, 200)), loss="binary_crossentropy", metrics=["accuracy"])
    return model


if __name__ == "__main__":
    rng = np.random.default_rng(2)
    x = rng.integers(1, 2000, size=(512, 40)).astype("int32")
    y = (x[:, 0] > 1000).astype("float32")
    build().fit(x, y, batch_size=64, epochs=2, verbose=2, callbacks=[LossScaleLogger()])
