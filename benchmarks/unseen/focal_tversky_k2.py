"""tf_keras lesion segmentation with the focal Tversky loss (Abraham & Khan 2019): Tversky index
TP / (TP + a FN + b FP) over the flattened batch, alpha = 0.7 to weigh missed lesion pixels more,
raised to gamma = 0.75; a small encoder-decoder with a sigmoid mask head."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

SIZE = 96


def focal_tversky(y_true, y_pred, alpha=0.7, gamma=0.75, smooth=1.0):
    y_true = tf.cast(tf.reshape(y_true, [-1]), y_pred.dtype)
    y_pred = tf.reshape(y_pred, [-1])
    tp = tf.reduce_sum(y_true * y_pred)
    fn = tf.reduce_sum(y_true * (1.0 - y_pred))
    fp = tf.reduce_sum((1.0 - y_true) * y_pred)
    tversky = (tp + smooth) / (tp + alpha * fn + (1.0 - alpha) * fp + smooth)
    return tf.pow(1.0 - tversky, gamma)


def build():
    inp = keras.Input((SIZE, SIZE, 1))
    c1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    p1 = keras.layers.MaxPooling2D()(c1)
    c2 = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(p1)
    u1 = keras.layers.Concatenate()([keras.layers.UpSampling2D()(c2), c1])
    d1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(u1)
    mask = keras.layers.Conv2D(1, 1, activation="sigmoid")(d1)
    return keras.Model(inp, mask)


def make_scans(n=128, seed=2):
    """Noisy scans with one to three bright elliptical lesions each."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:SIZE, :SIZE]
    x = rng.normal(0.0, 0.3, size=(n, SIZE, SIZE, 1)).astype("float32")
    y = np.zeros((n, SIZE, SIZE, 1), "float32")
    for i in range(n):
        for _ in range(rng.integers(1, 4)):
            cy, cx = rng.uniform(10, SIZE - 10, 2)
            ry, rx = rng.uniform(3, 9, 2)
            blob = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
            y[i, blob, 0] = 1.0
            x[i, blob, 0] += 1.0
    return x, y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_scans()
    model = build()
    model.compile(keras.optimizers.Adam(3e-3), loss=focal_tversky,
                  metrics=[keras.metrics.BinaryIoU(target_class_ids=[1], threshold=0.5)])
    model.fit(x, y, batch_size=32, epochs=2, verbose=2)


if __name__ == "__main__":
    main()
