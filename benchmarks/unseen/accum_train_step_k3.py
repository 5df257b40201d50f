"""Keras 3 image classifier with gradient accumulation inside an overridden train_step."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")


class AccumModel(keras.Model):
    def __init__(self, *args, accum_steps=4, **kwargs):
        super().__init__(*args, **kwargs)
        self.accum_steps = accum_steps
        self.micro = tf.Variable(0, trainable=False, dtype=tf.int64)
        self.accum = []

    def init_accumulators(self):
        self.optimizer.build(self.trainable_variables)
        self.accum = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.trainable_variables]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        for slot, g in zip(self.accum, grads):
            slot.assign_add(g / self.accum_steps)
        self.micro.assign_add(1)

        def apply():
            scale = self.optimizer.dynamic_scale
            unscaled = [slot / scale for slot in self.accum]
            self.optimizer.apply_gradients(zip(unscaled, self.trainable_variables))
            for slot in self.accum:
                slot.assign(tf.zeros_like(slot))
            return tf.constant(True)

        tf.cond(self.micro % self.accum_steps == 0, apply, lambda: tf.constant(False))
        return self.compute_metrics(x, y, y_pred)


def build():
    inputs = keras.Input((32, 32, 3))
    h = layers.Conv2D(32, 3, activation="relu")(inputs)
    h = layers.MaxPooling2D()(h)
    h = layers.Conv2D(64, 3, activation="relu")(h)
    h = layers.GlobalAveragePooling2D()(h)
    outputs = layers.Dense(10, activation="softmax", dtype="float32")(h)
    return AccumModel(inputs, outputs, accum_steps=4)


if __name__ == "__main__":
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(256, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(256,))
    model = build()
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.init_accumulators()
    model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=8, verbose=2)
