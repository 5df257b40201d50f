"""Keras 2 (tf_keras) binary segmentation: small U-Net, fit with a soft Dice + BCE loss function."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
SIZE = 96


def conv_block(x, filters):
    x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    return keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)


def unet(size=SIZE):
    inputs = keras.Input((size, size, 3))
    c1 = conv_block(inputs, 8)
    p1 = keras.layers.MaxPooling2D()(c1)
    c2 = conv_block(p1, 16)
    u1 = keras.layers.UpSampling2D()(c2)
    c3 = conv_block(keras.layers.Concatenate()([u1, c1]), 8)
    mask = keras.layers.Conv2D(1, 1, activation="sigmoid")(c3)
    return keras.Model(inputs, mask)


def dice_bce(y_true, y_pred, smooth=1.0):
    intersection = tf.reduce_sum(y_true * y_pred)
    total = tf.reduce_sum(y_true) + tf.reduce_sum(y_pred)
    dice = (2.0 * intersection + smooth) / (total + smooth)
    return keras.losses.binary_crossentropy(y_true, y_pred) + (1.0 - dice)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(32, SIZE, SIZE, 3)).astype("float32")
    masks = (images[..., :1] > 0.3).astype("float32")
    model = unet()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=dice_bce)
    history = model.fit(images, masks, batch_size=16, epochs=1, steps_per_epoch=2, verbose=2)
    print("losses", history.history["loss"])
