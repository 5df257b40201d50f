"""Single-object localisation head with a GIoU loss on pixel-unit boxes (x1, y1, x2, y2)."""
import numpy as np
import tensorflow as tf

IMAGE = 512


def box_area(b):
    return tf.maximum(b[..., 2] - b[..., 0], 0.0) * tf.maximum(b[..., 3] - b[..., 1], 0.0)


def giou_loss(boxes_true, boxes_pred):
    boxes_true = tf.cast(boxes_true, boxes_pred.dtype)
    lt = tf.maximum(boxes_true[..., :2], boxes_pred[..., :2])
    rb = tf.minimum(boxes_true[..., 2:], boxes_pred[..., 2:])
    inter = tf.reduce_prod(tf.maximum(rb - lt, 0.0), axis=-1)
    union = box_area(boxes_true) + box_area(boxes_pred) - inter
    enclose = tf.maximum(boxes_true[..., 2:], boxes_pred[..., 2:]) - tf.minimum(boxes_true[..., :2], boxes_pred[..., :2])
    enclose_area = enclose[..., 0] * enclose[..., 1]
    giou = inter / (union + 1e-6) - (enclose_area - union) / (enclose_area + 1e-6)
    return tf.reduce_mean(1.0 - giou)


def localizer():
    images = tf.keras.Input((64, 64, 3))
    h = tf.keras.layers.Conv2D(16, 3, strides=2, activation="relu")(images)
    h = tf.keras.layers.Conv2D(32, 3, strides=2, activation="relu")(h)
    h = tf.keras.layers.GlobalAveragePooling2D()(h)
    boxes = tf.keras.layers.Dense(4, activation="sigmoid")(h)
    boxes = tf.keras.layers.Rescaling(float(IMAGE))(boxes)
    return tf.keras.Model(images, boxes)


if __name__ == "__main__":
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(11)
    images = rng.uniform(size=(64, 64, 64, 3)).astype("float32")
    x1y1 = rng.uniform(0, 100, size=(64, 2))
    boxes = np.concatenate([x1y1, x1y1 + rng.uniform(200, 400, size=(64, 2))], 1).astype("float32")
    model = localizer()
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = giou_loss(boxes, model(images, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        print("step", step, "loss", float(loss))
