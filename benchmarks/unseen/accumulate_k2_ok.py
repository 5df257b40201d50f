"""tf_keras gradient accumulation done right: unscale each micro-batch, clip the unscaled sum."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
MICRO_BATCHES = 4


class ScaledResidual(keras.layers.Layer):
    """Residual block whose statistics are computed in float32."""

    def __init__(self, units, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(units, activation="relu")
        self.epsilon = epsilon

    def call(self, x):
        h = self.dense(x)
        h32 = tf.cast(h, tf.float32)
        mean, var = tf.nn.moments(h32, axes=[-1], keepdims=True)
        normed = (h32 - mean) * tf.math.rsqrt(var + self.epsilon)
        return x + tf.cast(normed, x.dtype)


model = keras.Sequential(
    [keras.layers.Dense(64, input_shape=(10,)), ScaledResidual(64), ScaledResidual(64), keras.layers.Dense(1, dtype="float32")]
)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
accum = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]


@tf.function
def accumulate(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        loss += 1e-4 * tf.add_n([tf.nn.l2_loss(w) for w in model.trainable_weights if "kernel" in w.name])
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    for a, g in zip(accum, grads):
        a.assign_add(g / MICRO_BATCHES)
    return loss


@tf.function
def apply_accumulated():
    grads, _ = tf.clip_by_global_norm([a.read_value() for a in accum], 5.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    for a in accum:
        a.assign(tf.zeros_like(a))


if __name__ == "__main__":
    rng = np.random.default_rng(13)
    x = rng.normal(size=(512, 10)).astype("float32")
    y = np.sin(x).sum(axis=1, keepdims=True).astype("float32")
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    for i, (xb, yb) in enumerate(batches.take(4 * MICRO_BATCHES)):
        loss = accumulate(xb, yb)
        if (i + 1) % MICRO_BATCHES == 0:
            apply_accumulated()
            print(i, float(loss))
