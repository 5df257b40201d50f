"""Keras 2 (tf_keras) advantage actor-critic on synthetic episodes: two networks, two optimizers."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
N_ACTIONS, OBS = 6, 16


def mlp(out_units, name):
    inputs = keras.Input((OBS,))
    h = keras.layers.Dense(128, activation="tanh")(inputs)
    h = keras.layers.Dense(128, activation="tanh")(h)
    return keras.Model(inputs, keras.layers.Dense(out_units, dtype="float32")(h), name=name)


actor, critic = mlp(N_ACTIONS, "actor"), mlp(1, "critic")
actor_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(3e-4))
critic_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1e-2))


@tf.function
def update(obs, actions, returns):
    with tf.GradientTape(persistent=True) as tape:
        logits = actor(obs, training=True)
        values = tf.squeeze(critic(obs, training=True), -1)
        advantage = tf.stop_gradient(returns - values)
        logp = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
        actor_loss = -tf.reduce_mean(logp * advantage)
        critic_loss = 0.5 * tf.reduce_mean(tf.square(returns - values))
        scaled_actor = actor_opt.get_scaled_loss(actor_loss)
    actor_grads = actor_opt.get_unscaled_gradients(tape.gradient(scaled_actor, actor.trainable_variables))
    critic_grads = critic_opt.get_unscaled_gradients(tape.gradient(critic_loss, critic.trainable_variables))
    del tape
    actor_opt.apply_gradients(zip(actor_grads, actor.trainable_variables))
    critic_opt.apply_gradients(zip(critic_grads, critic.trainable_variables))
    return actor_loss, critic_loss


if __name__ == "__main__":
    rng = np.random.default_rng(11)
    for it in range(5):
        obs = rng.normal(size=(256, OBS)).astype("float32")
        actions = rng.integers(0, N_ACTIONS, size=(256,)).astype("int32")
        returns = (obs[:, 0] * 3.0 + rng.normal(size=256)).astype("float32")
        a, c = update(obs, actions, returns)
        print(f"iter {it} actor {float(a):.4f} critic {float(c):.4f}")
