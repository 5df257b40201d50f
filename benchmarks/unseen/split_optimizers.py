"""Keras 3 fine-tuning: a slow optimizer for the backbone and a fast one for the head, one loss."""
import numpy as np
import tensorflow as tf

CLASSES = 6


def main(steps=8):
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    backbone = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(128, activation="relu")])
    head = tf.keras.layers.Dense(CLASSES)
    backbone_opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-5))
    head_opt = tf.keras.optimizers.SGD(1e-2, momentum=0.9)
    rng = np.random.default_rng(22)
    x = rng.normal(size=(256, 40)).astype("float32")
    y = tf.one_hot(rng.integers(0, CLASSES, size=256), CLASSES)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = head(backbone(xb, training=True))
            log_probs = tf.math.log(tf.nn.softmax(logits))
            loss = -tf.reduce_mean(tf.reduce_sum(tf.cast(log_probs, tf.float32) * yb, axis=-1))
            scaled = backbone_opt.scale_loss(loss)
        backbone_grads, head_grads = tape.gradient(scaled, [backbone.trainable_variables, head.trainable_variables])
        backbone_opt.apply_gradients(zip(backbone_grads, backbone.trainable_variables))
        head_opt.apply_gradients(zip(head_grads, head.trainable_variables))
        return loss

    for i in range(steps):
        idx = rng.choice(256, 32, replace=False)
        print(i, float(train_step(tf.gather(x, idx), tf.gather(y, idx))))


if __name__ == "__main__":
    main()
