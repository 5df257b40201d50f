"""Keras 2 (tf_keras) GRU sentiment classifier, custom loop, per-tensor gradient clipping."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build(vocab=5000, maxlen=80):
    tokens = keras.Input((maxlen,), dtype="int32")
    h = keras.layers.Embedding(vocab, 64, mask_zero=True)(tokens)
    h = keras.layers.Bidirectional(keras.layers.GRU(64))(h)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    return keras.Model(tokens, out)


model = build()
opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.5, momentum=0.9))
bce = keras.losses.BinaryCrossentropy()


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = bce(y, model(x, training=True))
        scaled_loss = opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = [tf.clip_by_norm(g, 1.0) for g in grads]
    grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(5)
    x = rng.integers(1, 5000, size=(256, 80)).astype("int32")
    y = (x[:, :1] > 2500).astype("float32")
    for epoch in range(3):
        for i in range(0, 256, 64):
            loss = step(x[i : i + 64], y[i : i + 64])
        print("epoch", epoch, "loss", float(loss))
