"""tf_keras Model subclass whose train_step hands the tape to optimizer.minimize (correct)."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class Tagger(keras.Model):
    def __init__(self, vocab, tags):
        super().__init__()
        self.embed = keras.layers.Embedding(vocab, 32)
        self.rnn = keras.layers.Bidirectional(keras.layers.GRU(32, return_sequences=True))
        self.out = keras.layers.Dense(tags, dtype="float32")

    def call(self, tokens, training=False):
        return self.out(self.rnn(self.embed(tokens), training=training))

    def train_step(self, data):
        tokens, tags = data
        with tf.GradientTape() as tape:
            logits = self(tokens, training=True)
            loss = self.compiled_loss(tags, logits, regularization_losses=self.losses)
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        self.compiled_metrics.update_state(tags, logits)
        return {m.name: m.result() for m in self.metrics}


if __name__ == "__main__":
    rng = np.random.default_rng(32)
    tokens = rng.integers(1, 300, size=(64, 12))
    tags = rng.integers(0, 5, size=(64, 12))
    model = Tagger(300, 5)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(tokens, tags, batch_size=16, epochs=1, steps_per_epoch=3, verbose=2)
