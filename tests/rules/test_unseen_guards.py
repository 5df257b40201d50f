"""Version guards found missing on the held-out scripts of ``benchmarks/unseen`` (issue 18).

A loop written for both Keras generations picks the scaling API by an API-presence test
(``LEGACY = not hasattr(keras.optimizers.Optimizer, "scale_loss")``): each arm of the guard is
right for its own generation. ``get_scaled_loss``/``get_unscaled_gradients`` are the old API and
``scale_loss`` the new one, although the API table translates each into the other (both
directions are listed there).
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])

DUAL = """
    import tensorflow as tf

    try:
        import tf_keras as keras
    except ImportError:
        from tensorflow import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    {flag}
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = optimizer.get_scaled_loss(loss) if {test} else optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        if {test}:
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def findings(code: str, keras: int):
    return lint_snippet(code, "MP3", keras=keras, policy="mixed_float16", fix=False, filename="train.py").findings


@BOTH
@pytest.mark.parametrize("flag, test", [
    ('LEGACY = not hasattr(keras.optimizers.Optimizer, "scale_loss")', "LEGACY"),
    ('HAS_GET_SCALED = hasattr(optimizer_cls, "get_scaled_loss")', "HAS_GET_SCALED"),
    ("", 'not hasattr(optimizer, "scale_loss")'),
])
def test_each_arm_of_an_api_presence_guard_is_left_to_its_generation(keras, flag, test):
    # An API-presence probe decides at run time, like try/except: each arm runs only where its API exists.
    assert findings(DUAL.format(flag=flag, test=test), keras) == []


@pytest.mark.parametrize("keras", [2, 3])
def test_an_unguarded_call_of_the_other_generation_is_still_reported(keras):
    code = DUAL.format(flag="", test="True").replace(
        "optimizer.get_scaled_loss(loss) if True else optimizer.scale_loss(loss)",
        "optimizer.scale_loss(loss)" if keras == 2 else "optimizer.get_scaled_loss(loss)")
    # one generation imported (the try/except import leaves the file to either)
    code = code.replace("""try:
        import tf_keras as keras
    except ImportError:
        from tensorflow import keras""", "import tf_keras as keras" if keras == 2 else "import keras")
    assert {f.code for f in findings(code, keras)} == {"MP303"}
