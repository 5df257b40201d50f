"""A float16 Dense layer whose matmul overflows inside `model.fit` (inputs ~1e4).

The first inf is created by the MatMul of the hidden Dense layer, inside Keras: the line
to fix is the one that builds that layer (`dtype="float32"`), not `model.fit`. Used by
the `--locate` and runtime-findings tests. Keras 3 and, with TF_USE_LEGACY_KERAS=1, tf_keras.
"""

import numpy as np
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(0)
x = (rng.normal(size=(64, 32)) * 1e4).astype("float32")
y = rng.normal(size=(64, 1)).astype("float32")

model = keras.Sequential([
    keras.Input((32,)),
    keras.layers.Dense(16, kernel_initializer=keras.initializers.Constant(1.0)),
    keras.layers.LayerNormalization(),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
model.fit(x, y, batch_size=16, epochs=3, verbose=0)
