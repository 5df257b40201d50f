"""Keras 3 sharpness-aware minimisation (Foret et al. 2021) in a Model subclass's train_step, for a
churn classifier on tabular features: ascend to w + rho * g / ||g||, take the gradient there, come
back, and apply it. Both gradients come from the LossScaleOptimizer's scale_loss."""
import numpy as np
import tensorflow as tf
import keras

RHO = 0.05


class SAMModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def train_step(self, data):
        x, y = data
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        # g / ||g|| is the same for scaled and unscaled gradients; a step whose scaled gradients
        # overflowed is skipped by the optimizer, so it must not move the weights either
        norm = tf.linalg.global_norm(grads)
        finite = tf.math.is_finite(norm)
        perturbations = [tf.where(finite, RHO * g / (norm + 1e-12), tf.zeros_like(g)) for g in grads]
        for v, e in zip(variables, perturbations):
            v.assign_add(e)
        with tf.GradientTape() as tape:
            sharp_loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            scaled = self.optimizer.scale_loss(sharp_loss)
        sharp_grads = tape.gradient(scaled, variables)
        for v, e in zip(variables, perturbations):
            v.assign_sub(e)
        self.optimizer.apply(sharp_grads, variables)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


def make_customers(n=20000, d=30, seed=12):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    logit = x[:, :5] @ rng.normal(size=5) + 0.5 * x[:, 5] * x[:, 6] - 1.0
    return x, (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype("float32")[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_customers()
    inputs = keras.Input((x.shape[1],))
    h = keras.layers.Dense(256, activation="relu")(inputs)
    h = keras.layers.Dense(256, activation="relu")(h)
    outputs = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    model = SAMModel(inputs, outputs)
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9), loss="binary_crossentropy")
    model.fit(x, y, batch_size=128, epochs=4, verbose=2)
    print("accuracy", float(np.mean((model.predict(x, verbose=0) > 0.5) == (y > 0.5))))


if __name__ == "__main__":
    main()
