"""Sale prices (~180000) cast to float16 in the tf.data map "for mixed precision": inf before
the model sees them, in the float32 baseline too (the map runs in both). The features' cast on
the same line is harmless: the policy would cast them anyway."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")


def to_half(features, price):
    return tf.cast(features, tf.float16), tf.cast(price, tf.float16)


rng = np.random.default_rng(3)
features = rng.normal(size=(512, 8)).astype("float32")
prices = (180000.0 + 40000.0 * features[:, 0]).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((features, prices)).map(to_half).batch(32)

inputs = tf.keras.Input((8,))
hidden = tf.keras.layers.Dense(16, activation="relu")(inputs)
outputs = tf.keras.layers.Dense(1, dtype="float32")(hidden)
model = tf.keras.Model(inputs, outputs)
model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mae")
model.fit(dataset, epochs=1, verbose=0)
