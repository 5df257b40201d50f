"""Keras 3 differentially private SGD (Abadi et al. 2016) for a credit-default classifier, written by hand:
per-example gradients from tape.jacobian, each clipped to L2 norm CLIP, summed, Gaussian noise added,
averaged, applied through the mixed-precision LossScaleOptimizer."""
import numpy as np
import tensorflow as tf
import keras

CLIP = 1.0
NOISE_MULTIPLIER = 0.5
BATCH = 128


def make_data(n=8192, d=24, seed=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    w = rng.normal(size=d).astype("float32")
    y = (x @ w + 0.5 * rng.normal(size=n) > 0).astype("float32")
    return x, y[:, None]


def build(d=24):
    return keras.Sequential([
        keras.Input((d,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.25))
    per_example_loss = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)

    @tf.function
    def private_step(xb, yb):
        with tf.GradientTape() as tape:
            losses = per_example_loss(yb, model(xb, training=True))
            scaled = optimizer.scale_loss(losses)
        jacobians = tape.jacobian(scaled, model.trainable_variables)
        sq_norms = tf.add_n([tf.reduce_sum(tf.reshape(j, [BATCH, -1]) ** 2, axis=1) for j in jacobians])
        factors = tf.minimum(1.0, CLIP / (tf.sqrt(sq_norms) + 1e-6))
        grads = []
        for j in jacobians:
            clipped = j * tf.reshape(factors, [BATCH] + [1] * (len(j.shape) - 1))
            noisy = tf.reduce_sum(clipped, axis=0) + tf.random.normal(j.shape[1:], stddev=NOISE_MULTIPLIER * CLIP)
            grads.append(noisy / BATCH)
        optimizer.apply(grads, model.trainable_variables)
        return tf.reduce_mean(losses)

    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(8192).batch(BATCH, drop_remainder=True)
    for epoch in range(3):
        losses = [float(private_step(xb, yb)) for xb, yb in data]
        acc = float(np.mean((model.predict(x, verbose=0) > 0) == (y > 0.5)))
        print(f"epoch {epoch}: loss {np.mean(losses):.4f} accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
