"""House-price style regression: a subclassed Model that owns its train_step."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")


class PriceRegressor(tf.keras.Model):
    def __init__(self, hidden=128):
        super().__init__()
        self.body = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(hidden, activation="relu"),
                tf.keras.layers.Dropout(0.1),
                tf.keras.layers.Dense(hidden, activation="relu"),
            ]
        )
        self.head = tf.keras.layers.Dense(1)
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")

    def call(self, inputs, training=False):
        return self.head(self.body(inputs, training=training))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            y = tf.cast(y, pred.dtype)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


if __name__ == "__main__":
    rng = np.random.default_rng(2)
    x = rng.normal(size=(256, 12)).astype("float32")
    # prices in thousands: targets of several hundred
    y = (400.0 + 120.0 * x[:, :1] + 30.0 * rng.normal(size=(256, 1))).astype("float32")
    model = PriceRegressor()
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3))
    model.fit(x, y, batch_size=32, epochs=1, steps_per_epoch=6, verbose=2)
