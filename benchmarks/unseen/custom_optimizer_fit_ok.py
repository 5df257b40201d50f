"""Keras 3: a hand-written Adam-with-decoupled-decay optimizer, used through compile/fit under mixed_float16."""
import numpy as np
import keras
from keras import ops


class SimpleAdamW(keras.optimizers.Optimizer):
    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, decay=1e-4, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon, self.decay = beta_1, beta_2, epsilon, decay

    def build(self, variables):
        super().build(variables)
        self.m = [self.add_variable_from_reference(v, "m") for v in variables]
        self.v = [self.add_variable_from_reference(v, "v") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        t = ops.cast(self.iterations + 1, variable.dtype)
        m = self.m[self._get_variable_index(variable)]
        v = self.v[self._get_variable_index(variable)]
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient))
        m_hat = m / (1.0 - ops.power(self.beta_1, t))
        v_hat = v / (1.0 - ops.power(self.beta_2, t))
        self.assign_sub(variable, lr * (m_hat / (ops.sqrt(v_hat) + self.epsilon) + self.decay * variable))


def model():
    inputs = keras.Input((32,))
    h = keras.layers.Dense(128, activation="relu")(inputs)
    h = keras.layers.Dense(128, activation="relu")(h)
    logits = keras.layers.Dense(5)(h)
    probs = keras.layers.Activation("softmax", dtype="float32")(logits)
    return keras.Model(inputs, probs)


if __name__ == "__main__":
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(12)
    x = rng.normal(size=(512, 32)).astype("float32")
    y = np.argmax(x[:, :5], axis=1)
    net = model()
    net.compile(optimizer=SimpleAdamW(3e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    net.fit(x, y, batch_size=64, epochs=3, verbose=2)
