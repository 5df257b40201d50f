"""tf_keras: gradient accumulation in a small helper class (4 micro-batches per optimizer step)."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class GradientAccumulator:
    """Sums gradients over micro-batches and applies their mean once."""

    def __init__(self, variables, steps):
        self.variables = variables
        self.steps = steps
        self.sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

    def add(self, grads):
        for total, g in zip(self.sums, grads):
            total.assign_add(tf.cast(g, total.dtype))

    def apply(self, optimizer):
        mean = [total / self.steps for total in self.sums]
        optimizer.apply_gradients(zip(mean, self.variables))
        for total in self.sums:
            total.assign(tf.zeros_like(total))


model = keras.Sequential([
    keras.layers.Dense(128, activation="relu", input_shape=(32,)),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dense(5, dtype="float32"),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
accumulator = GradientAccumulator(model.trainable_variables, steps=4)


@tf.function
def micro_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    accumulator.add(grads)
    return loss


rng = np.random.default_rng(8)
x = rng.normal(size=(512, 32)).astype("float32")
y = (x[:, :5].argmax(axis=1)).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=8).batch(16)
for epoch in range(3):
    losses = []
    for i, (xb, yb) in enumerate(ds):
        losses.append(float(micro_step(xb, yb)))
        if (i + 1) % accumulator.steps == 0:
            accumulator.apply(optimizer)
    print(f"epoch {epoch} loss {np.mean(losses):.4f}")
