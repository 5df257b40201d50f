"""tf_keras regression trained by a custom loop: a helper clips each gradient tensor to a norm of 0.5, then the
gradients are unscaled. Under mixed_float16 the helper clips gradients that still carry the loss scale (x32768), so
every update is ~1/32768 of the cap."""
import numpy as np
import tensorflow as tf
import tf_keras as keras


def clip_each(grads, max_norm=0.5):
    return [tf.clip_by_norm(g, max_norm) for g in grads]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.5).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05))

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = opt.get_unscaled_gradients(clip_each(grads))
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for epoch in range(2):
        for i in range(0, 1024, 64):
            loss = train_step(x[i:i + 64], y[i:i + 64])
        print("epoch", epoch, "loss", float(loss))


if __name__ == "__main__":
    main()
