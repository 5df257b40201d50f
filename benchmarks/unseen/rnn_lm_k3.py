"""Character-level LSTM language model, Keras 3 custom loop with a correctly scaled loss."""
import numpy as np
import tensorflow as tf
import keras

VOCAB, SEQ, BATCH = 96, 200, 128


class CharLM(keras.Model):
    def __init__(self, vocab=VOCAB, units=128):
        super().__init__()
        self.embed = keras.layers.Embedding(vocab, 64)
        self.lstm = keras.layers.LSTM(units, return_sequences=True)
        self.proj = keras.layers.Dense(vocab)

    def call(self, tokens, training=False):
        return self.proj(self.lstm(self.embed(tokens), training=training))


def main(steps=3):
    keras.mixed_precision.set_global_policy("mixed_float16")
    text = np.random.default_rng(0).integers(0, VOCAB, size=(BATCH * 4, SEQ + 1))
    ds = tf.data.Dataset.from_tensor_slices(text).batch(BATCH).map(lambda t: (t[:, :-1], t[:, 1:]))
    model = CharLM()
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(2e-3))

    @tf.function
    def train_step(inputs, targets):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
            loss = tf.reduce_mean(per_token)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step, (x, y) in enumerate(ds.take(steps)):
        print("step", step, "loss", float(train_step(x, y)))


if __name__ == "__main__":
    main()
