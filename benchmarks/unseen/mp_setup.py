"""Shared setup helpers for the sensor experiments."""
import tensorflow as tf


def configure_precision(use_mixed=True):
    if use_mixed:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    else:
        tf.keras.mixed_precision.set_global_policy("float32")
    return tf.keras.mixed_precision.global_policy()


def seed_everything(seed):
    tf.keras.utils.set_random_seed(seed)
