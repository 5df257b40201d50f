"""tf_keras click-through-rate model (hashed categorical embeddings + MLP) trained with a binary
focal loss whose class-balancing weight alpha_t is picked per example with tf.where, as in
RetinaNet: alpha for clicks, 1 - alpha for non-clicks."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

ALPHA, GAMMA, FIELDS, BUCKETS = 0.25, 2.0, 8, 1000


def focal_loss(y_true, y_pred):
    p = tf.clip_by_value(y_pred, 1e-3, 1.0 - 1e-3)
    p_t = tf.where(tf.equal(y_true, 1.0), p, 1.0 - p)
    alpha_t = tf.where(tf.equal(y_true, 1.0), ALPHA, 1.0 - ALPHA)
    return tf.reduce_mean(-alpha_t * tf.pow(1.0 - p_t, GAMMA) * tf.math.log(p_t), axis=-1)


def build():
    ids = keras.Input((FIELDS,), dtype="int32")
    h = keras.layers.Embedding(FIELDS * BUCKETS, 16)(ids)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    h = keras.layers.Dense(32, activation="relu")(h)
    click = keras.layers.Dense(1, activation="sigmoid")(h)
    return keras.Model(ids, click)


def make_data(n=8192, seed=6):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, BUCKETS, (n, FIELDS)) + BUCKETS * np.arange(FIELDS)
    w = rng.normal(0, 1, FIELDS * BUCKETS)
    logit = w[ids].sum(1) / np.sqrt(FIELDS) - 2.0
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype("float32")[:, None]
    return ids.astype("int32"), y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    model.compile(keras.optimizers.Adam(1e-3), loss=focal_loss, metrics=[keras.metrics.AUC()])
    model.fit(x, y, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
