"""Keras 3 house-price regression with a custom train_step that clips each gradient tensor to a norm of 1.0 in a
helper before the optimizer applies it. Under mixed_float16 the helper clips the gradients of
``optimizer.scale_loss(loss)``, which ``apply`` only unscales afterwards: every update is ~1/32768 of the cap."""
import numpy as np
import tensorflow as tf
import keras


def clip_each(grads, max_norm=1.0):
    return [tf.clip_by_norm(g, max_norm) for g in grads]


class ClippedModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.trainable_variables)
        grads = clip_each(grads)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            metric.update_state(loss) if metric.name == "loss" else metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.5).astype("float32")
    inp = keras.Input((8,))
    h = keras.layers.Dense(32, activation="relu")(keras.layers.Dense(32, activation="relu")(inp))
    model = ClippedModel(inp, keras.layers.Dense(1, dtype="float32")(h))
    model.compile(keras.optimizers.SGD(0.05), loss="mse")
    model.fit(x, y, batch_size=64, epochs=2, verbose=2)


if __name__ == "__main__":
    main()
