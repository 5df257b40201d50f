"""Keras 3: Model subclass with its own train_step, compiled and fit under MirroredStrategy (2 logical CPUs)."""
import numpy as np
import tensorflow as tf
import keras

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
keras.mixed_precision.set_global_policy("mixed_float16")


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = [keras.layers.Dense(128, activation="relu"), keras.layers.Dense(128, activation="relu")]
        self.head = keras.layers.Dense(1, dtype="float32")
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x, training=False):
        for layer in self.body:
            x = layer(x)
        return self.head(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = keras.losses.Huber()(y, pred)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = Regressor()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))

rng = np.random.default_rng(4)
x = rng.normal(size=(2048, 16)).astype("float32")
y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2]).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=4).batch(128).prefetch(tf.data.AUTOTUNE)
history = model.fit(ds, epochs=3, verbose=2)
print("loss", [round(v, 4) for v in history.history["loss"]], "scale", float(model.optimizer.dynamic_scale.numpy()))
