"""tf_keras gradient accumulation over micro-batches in a custom loop with a dynamic loss scale.

Each micro-batch's gradients are unscaled right away, accumulated in float32, and applied once
every ACCUM micro-batches through the LossScaleOptimizer (which skips the step if any is non-finite)."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

ACCUM = 4


def build_model():
    return keras.Sequential([
        keras.layers.Input((20,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model()
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    loss_fn = keras.losses.MeanSquaredError()
    buffers = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]

    @tf.function
    def accumulate(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) / ACCUM
            scaled_loss = optimizer.get_scaled_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled_grads)
        for buf, g in zip(buffers, grads):
            buf.assign_add(g)
        return loss * ACCUM

    @tf.function
    def apply():
        optimizer.apply_gradients(zip([b.read_value() for b in buffers], model.trainable_variables))
        for buf in buffers:
            buf.assign(tf.zeros_like(buf))

    rng = np.random.default_rng(12)
    x = rng.normal(size=(2048, 20)).astype("float32")
    y = (x[:, :5].sum(axis=1, keepdims=True) + 0.1 * rng.normal(size=(2048, 1))).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    for epoch in range(3):
        losses = []
        for i, (xb, yb) in enumerate(ds):
            losses.append(float(accumulate(xb, yb)))
            if (i + 1) % ACCUM == 0:
                apply()
        print(f"epoch {epoch}: loss {np.mean(losses):.4f} scale {float(optimizer.loss_scale):.0f}")


if __name__ == "__main__":
    main()
