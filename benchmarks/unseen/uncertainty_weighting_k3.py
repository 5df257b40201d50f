"""Keras 3 multi-task regressor/classifier weighting its two losses by learned homoscedastic
uncertainty (Kendall, Gal & Cipolla 2018): loss_i * exp(-s_i) + s_i, with s_i = log sigma_i^2 learned
alongside the network in a custom train_step."""
import numpy as np
import tensorflow as tf
import keras
from keras import ops


class MultiTaskNet(keras.Model):
    def __init__(self, n_classes=5, **kwargs):
        super().__init__(**kwargs)
        self.trunk = [keras.layers.Dense(128, activation="relu"), keras.layers.Dense(128, activation="relu")]
        self.reg_head = keras.layers.Dense(1, dtype="float32")
        self.cls_head = keras.layers.Dense(n_classes, dtype="float32")
        self.log_vars = self.add_weight(shape=(2,), initializer="zeros", name="log_vars")
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        for layer in self.trunk:
            x = layer(x)
        return self.reg_head(x), self.cls_head(x)

    def train_step(self, data):
        x, (y_reg, y_cls) = data
        with tf.GradientTape() as tape:
            reg, logits = self(x, training=True)
            l_reg = ops.mean(ops.square(y_reg - reg))
            l_cls = ops.mean(keras.losses.sparse_categorical_crossentropy(y_cls, logits, from_logits=True))
            weighted = ops.exp(-self.log_vars[0]) * l_reg + ops.exp(-self.log_vars[1]) * l_cls
            scaled = self.optimizer.scale_loss(weighted)
            # Kendall et al. eq. 10: + log sigma^2 keeps each task weight from going to zero
            scaled = scaled + ops.sum(self.log_vars)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        self.loss_tracker.update_state(weighted + ops.sum(self.log_vars))
        return {"loss": self.loss_tracker.result(), "s_reg": self.log_vars[0], "s_cls": self.log_vars[1]}

    @property
    def metrics(self):
        return [self.loss_tracker]


def make_data(n=8192, d=16, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    y_reg = (x[:, :4].sum(1, keepdims=True) + 0.5 * rng.normal(size=(n, 1))).astype("float32")
    y_cls = np.argmax(x[:, 4:9] + 0.7 * rng.normal(size=(n, 5)), axis=1).astype("int32")
    return x, (y_reg, y_cls)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = MultiTaskNet()
    model.compile(keras.optimizers.Adam(1e-2))
    model.fit(x, y, batch_size=128, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
