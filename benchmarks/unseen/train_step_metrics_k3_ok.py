"""Keras 3 subclassed Model with its own train_step: compute_loss, scale_loss, apply, compiled metrics."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class TaggedRegressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.layers.Dense(128, activation="relu"), keras.layers.Dense(128, activation="relu")])
        self.head = keras.layers.Dense(3, dtype="float32")

    def call(self, x, training=False):
        return self.head(self.encoder(x, training=training))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled_loss = self.optimizer.scale_loss(loss)
        trainable = self.trainable_variables
        grads = tape.gradient(scaled_loss, trainable)
        self.optimizer.apply(grads, trainable)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


if __name__ == "__main__":
    rng = np.random.default_rng(13)
    x = rng.normal(size=(512, 24)).astype("float32")
    y = np.stack([x[:, 0] * 2.0, x[:, 1] - x[:, 2], np.tanh(x[:, 3])], axis=1).astype("float32")
    model = TaggedRegressor()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3, global_clipnorm=1.0),
        loss=keras.losses.MeanSquaredError(),
        metrics=[keras.metrics.MeanAbsoluteError()],
    )
    model.fit(x, y, batch_size=64, epochs=2, verbose=2)
