"""A texture classifier on Gram-matrix (style) descriptors, written with keras.ops only (Keras 3).

A small conv stack, then the Gram matrix of its feature maps: `ops.einsum` over all 32 x 32
positions of the products of channel pairs, divided by the number of positions only after
the sum (the usual style-loss formula). ReLU features ~8 give ~1024 * 64 = 6.5*10^4 per
diagonal entry and more: inf in float16, NaN loss at step 0. No TensorFlow op in sight.
The fix: the Gram matrix in float32 (or the layer in float32).
Keras 3 only (keras.ops): `import keras` is Keras 3 whatever TF_USE_LEGACY_KERAS says.
"""

import numpy as np
import keras
from keras import ops

keras.mixed_precision.set_global_policy("mixed_float16")


class GramDescriptor(keras.layers.Layer):
    def call(self, features):
        positions = ops.shape(features)[1] * ops.shape(features)[2]
        gram = ops.einsum("bhwi,bhwj->bij", features, features)
        gram = gram / ops.cast(positions, gram.dtype)
        upper = ops.triu(ops.ones((ops.shape(gram)[1], ops.shape(gram)[2])))
        return ops.reshape(gram * ops.cast(upper, gram.dtype), (-1, ops.shape(gram)[1] * ops.shape(gram)[2]))


rng = np.random.default_rng(9)
images = rng.gamma(4.0, 16.0, size=(96, 32, 32, 3)).astype("float32")
labels = (images[..., 0].std(axis=(1, 2)) > images[..., 1].std(axis=(1, 2))).astype("int32")

model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(16, 3, padding="same", activation="relu",
                        kernel_initializer=keras.initializers.RandomUniform(0.0, 0.02)),
    GramDescriptor(),
    keras.layers.Dense(2, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(images, labels, batch_size=16, epochs=3, verbose=0)
