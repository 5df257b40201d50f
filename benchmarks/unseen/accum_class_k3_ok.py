"""Keras 3: gradient accumulation helper that applies through the LossScaleOptimizer (which unscales and skips inf)."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class Accumulator:
    def __init__(self, optimizer, variables, every):
        self.optimizer = optimizer
        self.variables = variables
        self.every = every
        self.buffers = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False) for v in variables]

    def accumulate(self, grads):
        for buf, g in zip(self.buffers, grads):
            buf.assign_add(tf.cast(g, tf.float32) / self.every)

    def step(self):
        self.optimizer.apply_gradients(zip([tf.identity(b) for b in self.buffers], self.variables))
        for buf in self.buffers:
            buf.assign(tf.zeros_like(buf))


inputs = keras.Input((28, 28, 1))
h = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
h = keras.layers.MaxPooling2D()(h)
h = keras.layers.Conv2D(32, 3, activation="relu")(h)
h = keras.layers.Flatten()(h)
model = keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(h))
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
acc = Accumulator(optimizer, model.trainable_variables, every=4)


@tf.function
def forward_backward(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled = optimizer.scale_loss(loss)
    acc.accumulate(tape.gradient(scaled, model.trainable_variables))
    return loss


@tf.function
def apply_step():
    acc.step()


rng = np.random.default_rng(2)
y = rng.integers(0, 10, size=(640,))
x = rng.normal(size=(640, 28, 28, 1)).astype("float32") * 0.3
x[np.arange(640), 2 * y + 3, 2 * y + 3, 0] += 3.0
for epoch in range(3):
    losses = []
    for i in range(0, 640, 16):
        losses.append(float(forward_backward(x[i:i + 16], y[i:i + 16])))
        if (i // 16 + 1) % acc.every == 0:
            apply_step()
    print(f"epoch {epoch} loss {np.mean(losses):.4f} scale {float(optimizer.dynamic_scale)}")
