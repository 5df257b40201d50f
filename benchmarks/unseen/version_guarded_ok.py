"""A training loop that runs on Keras 2 and Keras 3: guarded loss-scaling calls (correct)."""
import numpy as np
import tensorflow as tf
from packaging import version

try:
    import tf_keras as keras
except ImportError:
    from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
LEGACY = not hasattr(keras.optimizers.Optimizer, "scale_loss")

model = keras.Sequential([keras.layers.Dense(32, activation="relu", input_shape=(6,)), keras.layers.Dense(1, dtype="float32")])
if version.parse(tf.__version__) >= version.parse("2.4"):
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
else:
    optimizer = keras.mixed_precision.experimental.LossScaleOptimizer(keras.optimizers.SGD(0.01), loss_scale="dynamic")


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        scaled = optimizer.get_scaled_loss(loss) if LEGACY else optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    if LEGACY:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(23)
    x = rng.normal(size=(128, 6)).astype("float32")
    y = np.tanh(x[:, :1]).astype("float32")
    for i in range(6):
        print(i, float(train_step(x, y)))
