"""Keras 3 custom loop with gradient accumulation over micro-batches and a running-error metric."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
ACCUM_STEPS = 4
CLIP_NORM = 1.0


class GradientAccumulator:
    """Sums gradients over several micro-batches before one optimizer step."""

    def __init__(self, variables):
        self.variables = variables
        self.sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

    def add(self, grads):
        for acc, g in zip(self.sums, grads):
            acc.assign_add(g)

    def apply(self, optimizer):
        grads = [acc / ACCUM_STEPS for acc in self.sums]
        grads, _ = tf.clip_by_global_norm(grads, CLIP_NORM)
        optimizer.apply_gradients(zip(grads, self.variables))
        for acc in self.sums:
            acc.assign(tf.zeros_like(acc))


class RunningSquaredError:
    def __init__(self):
        self.total = tf.Variable(0.0)
        self.count = tf.Variable(0.0)

    def update(self, y_true, y_pred):
        err = y_pred - tf.cast(y_true, y_pred.dtype)
        self.total.assign_add(tf.cast(tf.reduce_sum(tf.square(err)), tf.float32))
        self.count.assign_add(tf.cast(tf.size(err), tf.float32))

    def result(self):
        return self.total / self.count


def make_model():
    return tf.keras.Sequential(
        [tf.keras.Input((24,)), tf.keras.layers.Dense(96, activation="relu"), tf.keras.layers.Dense(3)]
    )


if __name__ == "__main__":
    rng = np.random.default_rng(10)
    x = rng.normal(size=(512, 24)).astype("float32")
    y = (50.0 * x[:, :3] + 200.0).astype("float32")
    model = make_model()
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(1e-3, momentum=0.9))
    accumulator = GradientAccumulator(model.trainable_variables)
    metric = RunningSquaredError()

    @tf.function
    def micro_step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - yb))
            scaled = optimizer.scale_loss(loss)
        accumulator.add(tape.gradient(scaled, model.trainable_variables))
        metric.update(yb, pred)
        return loss

    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    for i, (xb, yb) in enumerate(batches.take(4 * ACCUM_STEPS)):
        loss = micro_step(xb, yb)
        if (i + 1) % ACCUM_STEPS == 0:
            accumulator.apply(optimizer)
            print(i, float(loss), float(metric.result()))
