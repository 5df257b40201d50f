"""tf_keras model with its own train_step that lets the optimizer do the step (minimize with the tape)."""
import numpy as np
import tensorflow as tf
import tf_keras as keras


class RatingModel(keras.Model):
    def __init__(self, n_users, n_items, dim=32, **kwargs):
        super().__init__(**kwargs)
        self.users = keras.layers.Embedding(n_users, dim)
        self.items = keras.layers.Embedding(n_items, dim)
        self.mlp = keras.Sequential([keras.layers.Dense(64, activation="relu"),
                                     keras.layers.Dense(1, dtype="float32")])
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, inputs):
        u, i = inputs[:, 0], inputs[:, 1]
        return self.mlp(tf.concat([self.users(u), self.items(i)], axis=-1))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = self.compiled_loss(y, pred, regularization_losses=self.losses)
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(8)
    pairs = np.stack([rng.integers(0, 300, 4096), rng.integers(0, 500, 4096)], axis=1)
    ratings = (1.0 + 4.0 * ((pairs[:, 0] * 7 + pairs[:, 1] * 3) % 11) / 10.0).astype("float32")
    model = RatingModel(300, 500)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")
    model.fit(pairs, ratings[:, None], batch_size=128, epochs=4, verbose=2)
    print("loss scale", float(model.optimizer.loss_scale))


if __name__ == "__main__":
    main()
