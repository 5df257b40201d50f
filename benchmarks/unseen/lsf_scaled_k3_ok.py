"""Keras 3 fixed loss scale: SGD(loss_scale_factor=...) with compile(auto_scale_loss=False) and a train_step that scales."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class SegNet(keras.Model):
    def __init__(self):
        super().__init__()
        self.enc = keras.layers.Conv2D(16, 3, padding="same", activation="relu")
        self.mid = keras.layers.Conv2D(16, 3, padding="same", activation="relu")
        self.out = keras.layers.Conv2D(1, 1, dtype="float32")

    def call(self, x):
        return self.out(self.mid(self.enc(x)))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=logits)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return {"loss": loss}


model = SegNet()
model.compile(
    optimizer=keras.optimizers.SGD(0.1, momentum=0.9, loss_scale_factor=256.0),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    auto_scale_loss=False,
)
rng = np.random.default_rng(12)
x = rng.normal(size=(256, 24, 24, 1)).astype("float32")
y = (x > 0.5).astype("float32")
history = model.fit(x, y, batch_size=32, epochs=4, verbose=2)
print("loss", [round(v, 4) for v in history.history["loss"]], type(model.optimizer).__name__)
