"""SimCLR-style contrastive pretraining with a hand-written NT-Xent loss and a sharp temperature.

Two noisy views of each sensor sample go through one encoder; the loss is written out as
-log(exp(pos / T) / sum_k exp(sim_k / T)) over cosine similarities with T = 0.05 (custom
loop, loss scaling for both Keras generations). The similarities are cosines (<= 1), but
two views of one sample start ~0.9 alike: exp(0.9 / 0.05) = exp(18) ~ 6.6*10^7, inf in
float16 (exp overflows past 11.09), and inf / inf is NaN at step 0.
The fix: the similarity logits and the loss in float32 (or a log-softmax form).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
TEMPERATURE = 0.05
BATCH = 32

encoder = keras.Sequential([
    keras.Input((24,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(32),
])
optimizer = keras.optimizers.Adam(1e-3)
if keras.mixed_precision.global_policy().name == "mixed_float16":
    optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)


def nt_xent(z1, z2):
    z1 = tf.math.l2_normalize(z1, axis=1)
    z2 = tf.math.l2_normalize(z2, axis=1)
    sim = tf.matmul(z1, z2, transpose_b=True) / TEMPERATURE
    numerator = tf.exp(tf.linalg.diag_part(sim))
    denominator = tf.reduce_sum(tf.exp(sim), axis=1)
    return -tf.reduce_mean(tf.math.log(numerator / denominator))


@tf.function
def train_step(view1, view2):
    with tf.GradientTape() as tape:
        loss = tf.cast(nt_xent(encoder(view1, training=True), encoder(view2, training=True)), tf.float32)
        if hasattr(optimizer, "get_scaled_loss"):
            target = optimizer.get_scaled_loss(loss)
        elif isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            target = optimizer.scale_loss(loss)
        else:
            target = loss
    grads = tape.gradient(target, encoder.trainable_variables)
    if hasattr(optimizer, "get_unscaled_gradients"):
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
    return loss


rng = np.random.default_rng(4)
samples = rng.normal(size=(256, 24)).astype("float32")
for epoch in range(3):
    for start in range(0, len(samples), BATCH):
        batch = samples[start:start + BATCH]
        view1 = batch + rng.normal(0, 0.1, batch.shape).astype("float32")
        view2 = batch + rng.normal(0, 0.1, batch.shape).astype("float32")
        loss = train_step(tf.constant(view1), tf.constant(view2))
print("final loss", float(loss))
