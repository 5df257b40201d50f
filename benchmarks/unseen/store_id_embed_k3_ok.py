"""Keras 3 click-through model for an app store: the app id arrives as its own int32 input and the dense
features as another; one layer embeds the id and joins it to the dense features (mixed_float16)."""
import numpy as np
import keras
from keras import ops

N_APPS = 6000


class AppFeatures(keras.layers.Layer):
    def __init__(self, n_apps, dim, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(n_apps, dim)

    def call(self, app_id, dense):
        app = ops.cast(app_id, "int32")
        return ops.concatenate([self.embed(app), dense], axis=-1)


def make_data(n=60000, seed=22):
    rng = np.random.default_rng(seed)
    app = rng.integers(0, N_APPS, n)
    appeal = rng.normal(0.0, 1.5, N_APPS)
    rank = rng.uniform(0.0, 1.0, n)
    rating = rng.uniform(1.0, 5.0, n)
    logit = appeal[app] - 2.0 * rank + 0.4 * (rating - 3.0)
    clicked = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-logit))).astype("float32")
    dense = np.stack([rank, rating / 5.0], axis=1).astype("float32")
    return app.astype("int32"), dense, clicked


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    app, dense, clicked = make_data()
    app_in = keras.Input((), dtype="int32")
    dense_in = keras.Input((2,))
    h = AppFeatures(N_APPS, 8)(app_in, dense_in)
    h = keras.layers.Dense(64, activation="relu")(h)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    model = keras.Model([app_in, dense_in], out)
    model.compile(keras.optimizers.Adam(1e-2), "binary_crossentropy", metrics=["auc"])
    model.fit([app, dense], clicked, batch_size=256, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
