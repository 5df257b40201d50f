"""Keras 3 subclassed model with a custom train_step; L2 kernel regularisers on every Dense."""
import numpy as np
import tensorflow as tf
import keras


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        reg = keras.regularizers.L2(1e-2)
        self.body = [keras.layers.Dense(64, activation="relu", kernel_regularizer=reg) for _ in range(2)]
        self.head = keras.layers.Dense(1, dtype="float32", kernel_regularizer=reg)
        self.mse = keras.losses.MeanSquaredError()

    def call(self, x, training=False):
        for layer in self.body:
            x = layer(x)
        return self.head(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = self.mse(y, pred)
            total = self.optimizer.scale_loss(loss) + tf.add_n(self.losses)
        grads = tape.gradient(total, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"mse": loss}


if __name__ == "__main__":
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(9)
    x = rng.normal(size=(512, 20)).astype("float32")
    y = x[:, :1] * 3.0
    model = Regressor()
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    model.fit(x, y, batch_size=64, epochs=2, verbose=2)
