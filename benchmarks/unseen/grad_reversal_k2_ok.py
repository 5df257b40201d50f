"""tf_keras domain-adversarial network (DANN, Ganin & Lempitsky 2015): a gradient reversal layer
written with tf.custom_gradient flips and scales the domain classifier's gradient into the feature
extractor; custom loop with a LossScaleOptimizer."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

LAMBDA = 0.3


@tf.custom_gradient
def reverse_gradient(x):
    def grad(dy):
        return -LAMBDA * dy
    return tf.identity(x), grad


class GradientReversal(keras.layers.Layer):
    def call(self, x):
        return reverse_gradient(x)


def build(d_in=20):
    x = keras.Input((d_in,))
    f = keras.layers.Dense(64, activation="relu")(x)
    f = keras.layers.Dense(32, activation="relu")(f)
    label = keras.layers.Dense(2, dtype="float32", name="label")(f)
    d = GradientReversal()(f)
    d = keras.layers.Dense(32, activation="relu")(d)
    domain = keras.layers.Dense(1, dtype="float32", name="domain")(d)
    return keras.Model(x, [label, domain])


def make_data(n=2048, d=20, seed=12):
    """Source and target share the labelling rule; the target is shifted and rescaled."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    xs = rng.normal(size=(n, d))
    xt = 1.5 * rng.normal(size=(n, d)) + 0.8
    ys = (xs @ w > 0).astype("int32")
    yt = (xt @ w > 0.8 * w.sum()).astype("int32")
    return xs.astype("float32"), ys, xt.astype("float32"), yt


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    xs, ys, xt, yt = make_data()
    model = build()
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def train_step(x_src, y_src, x_tgt):
        x = tf.concat([x_src, x_tgt], 0)
        dom = tf.concat([tf.zeros((tf.shape(x_src)[0], 1)), tf.ones((tf.shape(x_tgt)[0], 1))], 0)
        with tf.GradientTape() as tape:
            label_logits, dom_logits = model(x, training=True)
            loss = ce(y_src, label_logits[:tf.shape(x_src)[0]]) + bce(dom, dom_logits)
            scaled = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for epoch in range(4):
        perm = np.random.default_rng(epoch).permutation(len(xs))
        for i in range(0, len(xs), 128):
            idx = perm[i:i + 128]
            loss = train_step(xs[idx], ys[idx], xt[idx])
        acc = (np.argmax(model(xt)[0], 1) == yt).mean()
        print(f"epoch {epoch} loss {float(loss):.3f} target accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
