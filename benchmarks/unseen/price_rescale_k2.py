"""tf_keras house-price regressor that predicts in dollars: the network learns a standardised price
and a final Rescaling layer maps it back to dollars (scale = std, offset = mean of the training
prices), so predict() needs no post-processing; the Dense head is kept in float32 as the mixed
precision guide advises."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tf_keras as keras


def make_data(n=3000, d=12, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    w = rng.normal(size=d)
    price = 180000 + 60000 * np.tanh(x @ w / 3) + 15000 * rng.normal(size=n)
    return x, price.astype("float32")[:, None]


def build(d, mean, std):
    x = keras.Input((d,))
    h = keras.layers.Dense(64, activation="relu")(x)
    h = keras.layers.Dense(64, activation="relu")(h)
    z = keras.layers.Dense(1, dtype="float32", name="z_price")(h)
    dollars = keras.layers.Rescaling(scale=std, offset=mean, name="to_dollars")(z)
    return keras.Model(x, dollars)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    mean, std = float(y[:2400].mean()), float(y[:2400].std())
    model = build(x.shape[1], mean, std)
    model.compile(keras.optimizers.Adam(1e-3), loss="mae")
    model.fit(x[:2400], y[:2400], validation_data=(x[2400:], y[2400:]), batch_size=64, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
