"""Policy-gradient agent with illegal-action masking (REINFORCE on a toy board game), tf.keras + LSO."""
import numpy as np
import tensorflow as tf

N_ACTIONS = 32


def policy_net():
    board = tf.keras.Input(shape=(64,))
    h = tf.keras.layers.Dense(128, activation="relu")(board)
    h = tf.keras.layers.Dense(128, activation="relu")(h)
    logits = tf.keras.layers.Dense(N_ACTIONS)(h)
    return tf.keras.Model(board, logits)


def masked_log_probs(logits, legal):
    illegal = 1.0 - tf.cast(legal, logits.dtype)
    masked = logits - illegal * 1e5
    return tf.nn.log_softmax(tf.cast(masked, tf.float32), axis=-1)


class Agent:
    def __init__(self):
        self.net = policy_net()
        self.opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(3e-4))

    @tf.function
    def update(self, boards, legal, actions, returns):
        with tf.GradientTape() as tape:
            logp = masked_log_probs(self.net(boards, training=True), legal)
            chosen = tf.gather(logp, actions, batch_dims=1)
            loss = -tf.reduce_mean(chosen * returns)
            scaled = self.opt.scale_loss(loss)
        grads = tape.gradient(scaled, self.net.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.net.trainable_variables))
        return loss


if __name__ == "__main__":
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(2)
    agent = Agent()
    for episode in range(3):
        boards = rng.normal(size=(256, 64)).astype("float32")
        legal = rng.uniform(size=(256, N_ACTIONS)) > 0.5
        legal[:, 0] = True
        actions = np.argmax(legal * rng.uniform(size=legal.shape), axis=1)
        returns = rng.normal(size=(256,)).astype("float32")
        print("episode", episode, "loss", float(agent.update(boards, legal, actions, returns)))
