"""tf_keras negative-binomial regression of daily page views (counts in the tens of thousands) from page and
calendar features: the network predicts log mean and log dispersion, and the compiled loss is the NB
negative log-likelihood written with lgamma, as in count models for web traffic and single-cell data."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


def nb_nll(y_true, y_pred):
    mu = tf.exp(y_pred[:, :1])
    theta = tf.exp(y_pred[:, 1:])
    log_lik = (tf.math.lgamma(y_true + theta) - tf.math.lgamma(theta) - tf.math.lgamma(y_true + 1.0)
               + theta * tf.math.log(theta / (theta + mu)) + y_true * tf.math.log(mu / (theta + mu)))
    return -tf.reduce_mean(log_lik, axis=-1)


def make_data(n=16384, d=16, seed=21):
    rng = np.random.default_rng(seed)
    pages = rng.normal(size=(n, d - 7)).astype("float32")
    weekday = np.eye(7, dtype="float32")[rng.integers(0, 7, n)]
    log_mu = 9.6 + 0.4 * pages[:, 0] - 0.2 * weekday[:, 5:].sum(1)
    mu = np.exp(log_mu)
    counts = rng.negative_binomial(8, 8 / (8 + mu)).clip(0, 60000)
    return np.concatenate([pages, weekday], 1), counts.astype("float32")[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    head_bias = keras.initializers.Constant([float(np.log(y.mean())), float(np.log(5.0))])
    model = keras.Sequential([
        keras.Input((x.shape[1],)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(2, bias_initializer=head_bias),
    ])
    model.compile(keras.optimizers.Adam(1e-3), loss=nb_nll)
    model.fit(x, y, batch_size=512, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
