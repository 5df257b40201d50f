"""Keras 3 tabular regressor for household electricity bills: a Normalization layer adapted on the
raw feature columns (annual kWh, floor area in square feet, household income in dollars, ...)
standardises them inside the model, so serving takes raw rows; mixed precision for the MLP."""
import numpy as np
import keras

FEATURES = ["annual_kwh", "floor_sqft", "income_usd", "occupants", "house_age_y", "heating_degree_days"]


def make_data(n=4000, seed=2):
    rng = np.random.default_rng(seed)
    kwh = rng.lognormal(np.log(9000), 0.5, n)
    sqft = rng.lognormal(np.log(1800), 0.4, n)
    income = rng.lognormal(np.log(70000), 0.6, n)
    occupants = rng.integers(1, 7, n)
    age = rng.uniform(0, 90, n)
    hdd = rng.normal(4500, 1200, n)
    x = np.stack([kwh, sqft, income, occupants, age, hdd], 1).astype("float32")
    bill = 0.14 * kwh / 12 + 0.01 * sqft + 0.0002 * income + 5 * occupants + rng.normal(0, 10, n)
    return x, (bill / 100.0).astype("float32")  # hundreds of dollars a month


def build(train_x):
    norm = keras.layers.Normalization(name="standardise")
    norm.adapt(train_x)
    raw = keras.Input((len(FEATURES),))
    h = norm(raw)
    h = keras.layers.Dense(64, activation="relu")(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    out = keras.layers.Dense(1, dtype="float32")(h)
    return keras.Model(raw, out)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build(x[:3200])
    model.compile(keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(x[:3200], y[:3200], validation_data=(x[3200:], y[3200:]), batch_size=64, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
