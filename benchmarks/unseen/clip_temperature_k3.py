"""Keras 3 two-tower image/text model with a learned CLIP temperature kept in float32."""
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")


class ContrastiveHead(layers.Layer):
    def build(self, input_shape):
        self.logit_scale = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(np.log(1 / 0.07)), dtype="float32", autocast=False, name="logit_scale"
        )

    def call(self, image_emb, text_emb):
        image_emb = tf.math.l2_normalize(image_emb, axis=-1)
        text_emb = tf.math.l2_normalize(text_emb, axis=-1)
        scale = tf.exp(tf.minimum(self.logit_scale, np.log(100.0)))
        return scale * tf.matmul(image_emb, text_emb, transpose_b=True)


class DualEncoder(keras.Model):
    def __init__(self, dim=64):
        super().__init__()
        self.image_tower = keras.Sequential([layers.Dense(128, activation="relu"), layers.Dense(dim)])
        self.text_tower = keras.Sequential([layers.Dense(128, activation="relu"), layers.Dense(dim)])
        self.head = ContrastiveHead()

    def call(self, inputs):
        images, texts = inputs
        return self.head(self.image_tower(images), self.text_tower(texts))


def clip_loss(_, logits):
    logits = tf.cast(logits, tf.float32)
    labels = tf.range(tf.shape(logits)[0])
    loss_i = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    loss_t = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.transpose(logits))
    return (loss_i + loss_t) / 2.0


if __name__ == "__main__":
    rng = np.random.default_rng(9)
    images = rng.normal(size=(256, 48)).astype("float32")
    texts = (images[:, :32] + 0.1 * rng.normal(size=(256, 32))).astype("float32")
    model = DualEncoder()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=clip_loss)
    model.fit((images, texts), np.zeros(256, "float32"), batch_size=64, epochs=1, verbose=2)
