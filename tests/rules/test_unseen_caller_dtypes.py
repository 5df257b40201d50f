"""Parameters the file's own callers decide (issue 18, benchmarks/unseen/vae_legacy.py:32).

``_float32_by_use`` makes a float16-looking name float32 when it meets an explicit float32 tensor:
outside a layer's ``call``, code that runs proves the other operand float32. That is a guess for
parameters nobody passes. When every call site in the file passes float16 (a VAE's
``reparameterize(mean, log_var)`` on the encoder's outputs), the mix with ``tf.random.normal``'s
float32 noise is the bug, not evidence: the parameters stay float16, so what is computed from them
in float16 (``tf.exp(0.5 * log_var)``) is seen.
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])
_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}


def found(code: str, keras: int) -> list[tuple[str, int]]:
    result = lint_snippet(code, "MP2", keras=keras, policy="mixed_float16", fix=False, filename="vae.py")
    return sorted((f.code, f.line) for f in result.findings)


VAE = """
    {import_keras}
    import tensorflow as tf


    class Encoder(keras.layers.Layer):
        def __init__(self, latent):
            super().__init__()
            self.hidden = keras.layers.Dense(256, activation="relu")
            self.mean = keras.layers.Dense(latent)
            self.log_var = keras.layers.Dense(latent)

        def call(self, x):
            h = self.hidden(x)
            return self.mean(h), self.log_var(h)


    def sample_latent(mu, log_sigma2):
        noise = tf.random.normal(tf.shape(mu))
        return mu + tf.exp(0.5 * log_sigma2) * noise


    encoder = Encoder(16)


    @tf.function
    def encode(x):
        mu, log_sigma2 = encoder(x)
        return {call}
"""


def _vae(keras: int, call: str) -> str:
    return VAE.format(import_keras=_IMPORT[keras], call=call)


@BOTH
def test_parameters_every_caller_passes_float16_are_not_made_float32_by_their_mix(keras):
    # The exp of the float16 log-variance overflows (inf from 11.1 up); before: float32 by use, unseen.
    assert found(_vae(keras, "sample_latent(mu, log_sigma2)"), keras) == [("MP204", 19)]


@BOTH
def test_callers_passing_float32_keep_the_helper_float32(keras):
    code = _vae(keras, "sample_latent(tf.cast(mu, tf.float32), tf.cast(log_sigma2, tf.float32))")
    assert found(code, keras) == []


@BOTH
def test_a_helper_nobody_in_the_file_calls_is_still_float32_by_use(keras):
    assert found(_vae(keras, "mu, log_sigma2"), keras) == []


@BOTH
def test_a_caller_passing_an_unknown_value_leaves_float32_by_use_in_place(keras):
    # One call site with float16, one with a value of unknown dtype: the callers do not decide.
    code = _vae(keras, "sample_latent(mu, log_sigma2)") + """

    def sample_from(stats):
        return sample_latent(stats["mu"], stats["log_sigma2"])
"""
    assert found(code, keras) == []
