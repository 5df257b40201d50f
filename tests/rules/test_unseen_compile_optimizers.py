"""Optimizers a model keeps as attributes set from a method's parameters, built at that method's call
site (benchmarks/unseen/gan_compile_k3.py, turn 9; issue 18 "object state"): a GAN's
``compile(self, d_optimizer, g_optimizer, loss_fn)`` override stores ``self.d_optimizer = d_optimizer``,
and the script builds the optimizers in ``gan.compile(d_optimizer=keras.optimizers.Adam(...))``.
``super().compile()`` wraps only Keras' own default optimizer, so both updates in ``train_step`` are
bare. The gradient path follows the attribute to the parameter, and the parameter to the calls of
that method on an instance of the class (or to the class's constructor calls, for ``__init__``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))
_KERAS = {3: "import keras", 2: "import tf_keras as keras"}

GAN = """
    {import_keras}
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")
    LATENT = 32


    class GAN(keras.Model):
        def __init__(self, generator, discriminator):
            super().__init__()
            self.generator = generator
            self.discriminator = discriminator

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer = d_optimizer
            self.g_optimizer = g_optimizer
            self.loss_fn = loss_fn

        def train_step(self, real):
            batch = tf.shape(real)[0]
            with tf.GradientTape() as tape:
                fake = self.generator(tf.random.normal((batch, LATENT)))
                logits = self.discriminator(tf.concat([fake, real], axis=0))
                labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], axis=0)
                d_loss = self.loss_fn(labels, logits)
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))

            with tf.GradientTape() as tape:
                logits = self.discriminator(self.generator(tf.random.normal((batch, LATENT))))
                g_loss = self.loss_fn(tf.zeros((batch, 1)), logits)
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
            return {{"d_loss": d_loss, "g_loss": g_loss}}


    gan = GAN(make_generator(), make_discriminator())
    gan.compile(
        d_optimizer={d_opt},
        g_optimizer={g_opt},
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    gan.fit(dataset, epochs=1)
"""
ADAM = "keras.optimizers.Adam(2e-4, beta_1=0.5)"


def gan(keras: int, d_opt: str = ADAM, g_opt: str = ADAM) -> str:
    code = textwrap.dedent(GAN.format(import_keras=_KERAS[keras], d_opt=d_opt, g_opt=g_opt)).lstrip("\n")
    compile(code, "train.py", "exec")
    return code


def lint(code: str, keras: int, *, fix: bool = False):
    engine = Engine(MP1, Options(keras=str(keras), unsafe_fixes=True, project_policy=False))
    return engine.lint(code, Path("train.py"), fix=fix)


@pytest.mark.parametrize("keras", [2, 3])
def test_optimizers_built_at_a_custom_compile_call_are_followed_and_fixed(keras):
    code = gan(keras)
    found = lint(code, keras).findings
    lines = code.splitlines()
    d_apply = next(i for i, l in enumerate(lines, 1) if "self.d_optimizer.apply_gradients" in l)
    g_apply = next(i for i, l in enumerate(lines, 1) if "self.g_optimizer.apply_gradients" in l)
    assert [(f.code, f.line) for f in found] == [("MP101", d_apply), ("MP101", g_apply)]
    assert all(f.fix is not None for f in found)
    assert all("has no loss scaling" in f.message for f in found)  # not "cannot see where it is built"

    fixed = lint(code, keras, fix=True).fixed_text
    cst.parse_module(fixed)
    lso = "keras.mixed_precision.LossScaleOptimizer"
    assert f"d_optimizer={lso}({ADAM})" in fixed
    assert f"g_optimizer={lso}({ADAM})" in fixed
    if keras == 3:
        assert "self.d_optimizer.scale_loss(d_loss)" in fixed and "self.g_optimizer.scale_loss(g_loss)" in fixed
    else:
        assert "self.d_optimizer.get_scaled_loss(d_loss)" in fixed
        assert "self.g_optimizer.get_unscaled_gradients(" in fixed
    assert [f.code for f in lint(fixed, keras).findings] == []


@pytest.mark.parametrize("keras", [2, 3])
def test_wrapped_at_the_compile_call_and_scaled_is_left_alone(keras):
    scale = "scale_loss" if keras == 3 else "get_scaled_loss"
    code = gan(keras, d_opt=f"keras.mixed_precision.LossScaleOptimizer({ADAM})",
               g_opt=f"keras.mixed_precision.LossScaleOptimizer({ADAM})")
    for loss, call in (("d_loss", "(labels, logits)"), ("g_loss", "(tf.zeros((batch, 1)), logits)")):
        opt = loss[0] + "_optimizer"
        code = code.replace(f"{loss} = self.loss_fn{call}\n",
                            f"{loss} = self.loss_fn{call}\n                scaled = self.{opt}.{scale}({loss})\n")
        code = code.replace(f"grads = tape.gradient({loss}, ", "grads = tape.gradient(scaled, ")
        if keras == 2:
            code = code.replace(f"self.{opt}.apply_gradients(zip(grads,",
                                f"self.{opt}.apply_gradients(zip(self.{opt}.get_unscaled_gradients(grads),")
    assert [f.code for f in lint(code, keras).findings] == []


def test_wrapped_at_the_compile_call_but_never_scaled_is_mp102():
    code = gan(3, d_opt=f"keras.mixed_precision.LossScaleOptimizer({ADAM})", g_opt=ADAM)
    codes = [f.code for f in lint(code, 3).findings]
    assert codes == ["MP102", "MP101"]


def test_a_compile_call_on_an_unknown_object_passing_the_same_keyword_is_not_guessed():
    code = gan(3) + "other.compile(d_optimizer=d_opt, g_optimizer=g_opt, loss_fn=None)\n"
    found = lint(code, 3).findings
    assert [f.code for f in found] == ["MP101", "MP101"]
    assert all(f.fix is None and "cannot see where" in f.message for f in found)


TRAINER = """
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Trainer:
        def __init__(self, model, optimizer):
            self.model = model
            self.optimizer = optimizer

        @tf.function
        def step(self, x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            return loss


    model = build_model()
    model.compile(optimizer="adam", loss="mse")
    trainer = Trainer(model, keras.optimizers.SGD(0.01))
    for x, y in batches:
        trainer.step(x, y)
"""


def test_a_plain_trainer_class_optimizer_from_its_constructor_is_not_a_compiled_models():
    # `self.optimizer` of a class that is not a Keras Model is the constructor's argument, not what
    # some model's compile() wrapped.
    code = textwrap.dedent(TRAINER).lstrip("\n")
    found = lint(code, 3).findings
    assert [(f.code, f.line) for f in found] == [("MP101", 17)]
    fixed = lint(code, 3, fix=True).fixed_text
    assert "Trainer(model, keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01)))" in fixed
    assert "self.optimizer.scale_loss(loss)" in fixed


WGAN = """
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class WGAN(keras.Model):
        def __init__(self, critic, generator, critic_opt, gen_opt):
            super().__init__()
            self.critic, self.generator = critic, generator
            self.critic_opt, self.gen_opt = critic_opt, gen_opt

        def train_step(self, real):
            noise = tf.random.normal((tf.shape(real)[0], 64))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(self.critic(self.generator(noise))) - tf.reduce_mean(self.critic(real))
                scaled = self.critic_opt.scale_loss(loss)
            grads = tape.gradient(scaled, self.critic.trainable_weights)
            self.critic_opt.apply_gradients(zip(grads, self.critic.trainable_weights))
            with tf.GradientTape() as tape:
                g_loss = -tf.reduce_mean(self.critic(self.generator(noise)))
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.gen_opt.apply_gradients(zip(grads, self.generator.trainable_weights))
            return {"loss": loss, "g_loss": g_loss}


    wgan = WGAN(make_critic(), make_generator(),
                keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-4)),
                keras.optimizers.Adam(1e-4))
    wgan.compile()
"""


def test_optimizers_stored_by_a_tuple_assignment_in_init_are_followed_to_the_constructor_call():
    code = textwrap.dedent(WGAN).lstrip("\n")
    found = lint(code, 3).findings
    assert [(f.code, f.line) for f in found] == [("MP101", 23)]  # gen_opt: plain; critic_opt: an LSO, scaled
    assert "has no loss scaling" in found[0].message and found[0].fix is not None
    fixed = lint(code, 3, fix=True).fixed_text
    assert "keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-4)))" in fixed
    assert "self.gen_opt.scale_loss(g_loss)" in fixed
    assert lint(fixed, 3).findings == []
