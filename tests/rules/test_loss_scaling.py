"""Loss scaling in custom training loops (MP101–MP108): fixture pairs, must-not-flag list, edge cases.

Fixture pairs live in ``fixtures/loss_scaling/NAME.kN.in.py`` → ``NAME.kN.out.py``: the input is
fixed with every MP1xx rule (unsafe fixes on) for Keras generation N and must give the output
exactly, and the output must be left alone by a second run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.codemods.analysis.gradient_path import training_steps
from mpfix.codemods.base import RuleContext
from mpfix.codemods.names import ImportTable
from mpfix.engine import Engine, Options
from mpfix.policy import policy_in_text

import libcst as cst

FIXTURES = Path(__file__).parent / "fixtures" / "loss_scaling"
MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))


def lint(code: str, keras: int, *, fix: bool = True, loss_scale: float | None = None, policy: str | None = None,
         rules=MP1):
    engine = Engine(rules, Options(keras=str(keras), policy=policy, unsafe_fixes=True, project_policy=False,
                                   loss_scale=loss_scale))
    return engine.lint(textwrap.dedent(code).lstrip("\n"), Path("script.py"), fix=fix)


def codes(result) -> list[str]:
    return sorted(f.code for f in result.findings)


def _pairs():
    for source in sorted(FIXTURES.glob("*.in.py")):
        stem = source.name[: -len(".in.py")]
        name, _, gen = stem.rpartition(".k")
        yield pytest.param(source, source.with_name(f"{stem}.out.py"), int(gen), id=stem)


@pytest.mark.parametrize(("source", "expected", "keras"), list(_pairs()))
def test_fixture_pair(source: Path, expected: Path, keras: int):
    loss_scale = 1024.0 if "fixed_scale" in source.name else None
    assert lint(source.read_text(), keras, fix=False, loss_scale=loss_scale).findings, "the input must be flagged"
    result = lint(source.read_text(), keras, loss_scale=loss_scale)
    assert not result.errors, result.errors
    assert result.fixed_text == expected.read_text()
    again = lint(expected.read_text(), keras, loss_scale=loss_scale)
    assert again.fixed_text is None
    assert [f.code for f in again.findings if f.fix is not None] == []


def test_every_rule_has_a_fixture_or_example_on_both_generations():
    # Keras-3-only and Keras-2-only rules aside, each fixable rule is exercised on both.
    generations: dict[str, set[int]] = {}
    for rule in MP1:
        for example in rule.INVALID:
            for gen in ([example.keras] if example.keras else [2, 3]):
                if gen in rule.keras_generations:
                    generations.setdefault(rule.code, set()).add(gen)
    for rule in MP1:
        assert generations.get(rule.code) == set(rule.keras_generations), rule.code


# ----------------------------------------------------------------- must not flag (both generations)
MUST_NOT_FLAG = {
    "minimize-with-tape": """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        optimizer.minimize(loss, model.trainable_variables, tape=tape)
    """,
    "isinstance-guard": """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = make_optimizer()
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
                loss = optimizer.scale_loss(loss)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
    "conditional-expression": """
        import tensorflow as tf
        import tf_keras
        tf_keras.mixed_precision.set_global_policy("mixed_float16")
        opt = tf_keras.optimizers.Adam()
        if amp:
            opt = tf_keras.mixed_precision.LossScaleOptimizer(opt)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled = opt.get_scaled_loss(loss) if amp else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        grads = opt.get_unscaled_gradients(grads) if amp else grads
        opt.apply_gradients(zip(grads, model.trainable_variables))
    """,
    "tf-keras-correct": """
        import tensorflow as tf
        import tf_keras
        tf_keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.get_scaled_loss(loss)
            scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = optimizer.get_unscaled_gradients(scaled_grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
    "compile-fit": """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model = tf.keras.Sequential([tf.keras.layers.Dense(10), tf.keras.layers.Activation("softmax", dtype="float32")])
        model.compile(optimizer=tf.keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
        model.fit(x, y, epochs=2)
    """,
    "float32-only": """
        import tensorflow as tf
        optimizer = tf.keras.optimizers.Adam()
        for x, y in data:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
    "bfloat16": """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        optimizer = tf.keras.optimizers.Adam()
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
    "unrelated-apply": """
        import pandas as pd
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        frame = pd.DataFrame(rows)
        frame.apply(print)
    """,
}

# Per generation (the scaling API differs): re-entering the tape to scale is recorded.
REENTER_TAPE = {
    3: """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        with tape:
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
    2: """
        import tensorflow as tf
        import tf_keras
        tf_keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
        tape = tf.GradientTape()
        with tape:
            loss = loss_fn(y, model(x))
        with tape:
            scaled = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
}


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("name", sorted(MUST_NOT_FLAG))
def test_must_not_flag(name: str, keras: int):
    code = MUST_NOT_FLAG[name]
    if name == "isinstance-guard" and keras == 2:
        code = code.replace("scale_loss", "get_scaled_loss")
    result = lint(code, keras, fix=False)
    assert not result.errors
    assert codes(result) == []


@pytest.mark.parametrize("keras", [2, 3])
def test_reentered_tape_is_recorded(keras: int):
    result = lint(REENTER_TAPE[keras], keras, fix=False)
    assert codes(result) == []
    # ...while scaling after the block without re-entering is MP104.
    broken = textwrap.dedent(REENTER_TAPE[keras]).replace("with tape:\n    scaled", "for _ in range(1):\n    scaled")
    assert broken != textwrap.dedent(REENTER_TAPE[keras])
    assert "MP104" in codes(lint(broken, keras, fix=False))


# ----------------------------------------------------------------- generation boundaries
KERAS2_API_ON_KERAS3 = """
    import tensorflow as tf
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def test_keras2_api_on_keras3_is_left_to_mp303():
    # On Keras 3 `get_scaled_loss` is an AttributeError that MP303 migrates; no MP1xx double report.
    assert codes(lint(KERAS2_API_ON_KERAS3, 3, fix=False)) == []
    # The same file under Keras 2 is missing its unscale: MP103, and the fix is safe.
    result = lint(KERAS2_API_ON_KERAS3, 2, fix=False)
    assert codes(result) == ["MP103"]
    assert str(result.findings[0].fix.safety) == "safe"


def test_keras3_dynamic_false_is_left_to_mp302():
    code = """
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), dynamic=False, initial_scale=128)
    """
    assert codes(lint(code, 3, fix=False)) == []
    assert codes(lint(code, 2, fix=False)) == ["MP107"]


@pytest.mark.parametrize("keras", [2, 3])
def test_unknown_optimizer_is_reported_without_a_guess(keras: int):
    code = """
        import tensorflow as tf
        from training.config import optimizer
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
    result = lint(code, keras)
    assert codes(result) == ["MP101"]
    assert result.findings[0].fix is None
    assert "cannot see where `optimizer` is built" in result.findings[0].message
    assert result.fixed_text is None


@pytest.mark.parametrize("keras", [2, 3])
def test_bfloat16_project_never_gets_an_lso(keras: int):
    code = MUST_NOT_FLAG["float32-only"]
    assert codes(lint(code, keras, policy="mixed_bfloat16")) == []
    # ...and one that has an LSO loses it (MP108), leaving code without scaling calls on Keras 2.
    with_lso = """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
    """
    assert codes(lint(with_lso, keras, fix=False)) == ["MP108"]
    assert "LossScaleOptimizer" not in lint(with_lso, keras).fixed_text


# ----------------------------------------------------------------- --loss-scale N (fixed scale)
PLAIN_STEP = """
    import tensorflow as tf
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    optimizer = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def test_fixed_loss_scale_keras3_uses_loss_scale_factor():
    # Keras 3 refuses LossScaleOptimizer(dynamic=False); the fixed form is loss_scale_factor (verified:
    # scale_loss multiplies by it and apply_gradients divides it back out).
    result = lint(PLAIN_STEP, 3, loss_scale=1024)
    assert "optimizer = tf.keras.optimizers.SGD(0.1, loss_scale_factor=1024.0)" in result.fixed_text
    assert "LossScaleOptimizer" not in result.fixed_text
    assert "scaled_loss = optimizer.scale_loss(loss)" in result.fixed_text
    assert lint(result.fixed_text, 3, loss_scale=1024).fixed_text is None


def test_fixed_loss_scale_keras2_uses_dynamic_false():
    result = lint(PLAIN_STEP, 2, loss_scale=1024)
    assert ("optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), "
            "dynamic=False, initial_scale=1024.0)") in result.fixed_text
    assert "grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss," in result.fixed_text
    # The fixed scale is what was asked for; MP107 still says what it costs (report only).
    assert [f.code for f in lint(result.fixed_text, 2).findings] == ["MP107"]


# ----------------------------------------------------------------- the step finder itself
def _analysis(code: str, keras: int = 3):
    module = cst.parse_module(textwrap.dedent(code))
    text = module.code
    context = RuleContext(module=module, path=Path("x.py"), keras=keras, policy=policy_in_text(text),
                          module_policy=policy_in_text(text), imports=ImportTable(module))
    return training_steps(context)


def test_finder_links_each_gradient_to_its_optimizer_through_clipping():
    analysis = _analysis(FIXTURES.joinpath("gan_persistent_tape.k3.in.py").read_text())
    pairs = sorted((f.optimizer, f.build.target, f.wrapped) for f in analysis.flows)
    assert pairs == [("discriminator_optimizer", "discriminator_optimizer", False),
                     ("generator_optimizer", "generator_optimizer", False)]
    assert all(analysis.tape_of(f).persistent for f in analysis.flows)


def test_finder_handles_nested_tapes_and_compiled_self_optimizer():
    code = """
        import tensorflow as tf
        class M(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as outer, tf.GradientTape() as inner:
                    loss = self.compute_loss(x, y, self(x))
                grads = outer.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
    """
    (flow,) = _analysis(code).flows
    assert flow.scope.name == "train_step" and flow.gradient.tape == "outer"
    assert flow.compiled and flow.wrapped is True


def test_finder_ignores_apply_that_gradients_do_not_reach():
    code = """
        import tensorflow as tf
        with tf.GradientTape() as tape:
            loss = f(x)
        grads = tape.gradient(loss, params)
        table.apply(normalise)
        optimizer.apply(grads, params)
    """
    (flow,) = _analysis(code).flows
    assert flow.optimizer == "optimizer"


def test_update_fed_by_two_gradients_is_one_finding_with_one_fix():
    # Sharpness-aware minimisation takes a gradient to perturb the weights, then the real one.
    code = """
        import tensorflow as tf
        import tf_keras
        tf_keras.mixed_precision.set_global_policy("mixed_float16")

        class SAM(tf_keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compiled_loss(y, self(x))
                first = tape.gradient(loss, self.trainable_variables)
                eps = [g / tf.norm(g) for g in first]
                with tf.GradientTape() as tape:
                    loss = self.compiled_loss(y, self(x, training=True))
                second = tape.gradient(loss, self.trainable_variables)
                grads = [a + 0 * b for a, b in zip(second, eps)]
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
    """
    found = lint(code, 2, fix=False)
    assert codes(found) == ["MP102"]
    fixed = lint(code, 2).fixed_text
    # Keras 2: self.optimizer is an LSO only if compile ran under mixed_float16, so both are guarded.
    guard = "isinstance(self.optimizer, tf_keras.mixed_precision.LossScaleOptimizer)"
    assert fixed.count(f"scaled_loss = self.optimizer.get_scaled_loss(loss) if {guard} else loss") == 2
    assert fixed.count("tape.gradient(scaled_loss, self.trainable_variables)") == 2
    for name in ("first", "second"):
        assert f"if {guard}:\n            {name} = self.optimizer.get_unscaled_gradients({name})" in fixed


def test_lso_spelling_uses_the_files_own_imports_or_adds_its_keras():
    # The file can already spell it (`tf.keras...`): no import is added.
    code = textwrap.dedent(PLAIN_STEP).replace("import tensorflow as tf", "import tensorflow as tf\nfrom keras import optimizers") \
        .replace("tf.keras.optimizers.SGD", "optimizers.SGD")
    fixed = lint(code, 3).fixed_text
    assert "optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizers.SGD(0.1))" in fixed
    assert fixed.count("import") == code.count("import")
    # A Keras-only file gets `import keras`, not TensorFlow's spelling.
    keras_only = """
        from keras import mixed_precision, optimizers
        from tensorflow import GradientTape
        mixed_precision.set_global_policy("mixed_float16")
        opt = optimizers.SGD(0.1)
        with GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    """
    fixed = lint(keras_only, 3).fixed_text
    assert "opt = mixed_precision.LossScaleOptimizer(optimizers.SGD(0.1))" in fixed
    fixed = lint(keras_only.replace("from keras import mixed_precision, optimizers",
                                    "from keras import optimizers\n        from keras.mixed_precision import set_global_policy")
                 .replace("mixed_precision.set_global_policy", "set_global_policy"), 3).fixed_text
    assert "import keras\n" in fixed and "opt = keras.mixed_precision.LossScaleOptimizer(optimizers.SGD(0.1))" in fixed


# ----------------------------------------------------------------- the gradient path (issue 13)
MP303 = tuple(r for r in all_rules() if r.code == "MP303")


def _k2_loop(between: str, optimizers: str = "") -> str:
    return f"""
        import keras
        import tensorflow as tf
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        {optimizers}
        def train_step(x, y):
            with tf.GradientTape() as tape:
                scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = opt.get_unscaled_gradients(grads)
            {between}
            opt.apply_gradients(zip(grads, model.trainable_variables))
    """


def _unscale_finding(code: str):
    found = [f for f in lint(code, 3, fix=False, rules=MP303).findings if f.message.startswith("`get_unscaled")]
    assert len(found) == 1, found
    return found[0]


def test_mp303_drops_an_unscale_safely_only_without_a_transform_after_it():
    plain = _unscale_finding(_k2_loop("pass"))
    assert str(plain.fix.safety) == "safe"
    moved = _unscale_finding(_k2_loop("grads, _ = tf.clip_by_global_norm(grads, 1.0)"))
    assert str(moved.fix.safety) == "unsafe" and "moves into the inner optimizer" in moved.message
    for blocker in ("grads = [g + tf.random.normal(tf.shape(g)) for g in grads]",
                    "grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)",
                    "grads, norm = tf.clip_by_global_norm(grads, 1.0)"):
        finding = _unscale_finding(_k2_loop(blocker))
        assert finding.fix is None, blocker
        assert "acting on scaled gradients" in finding.message


def test_mp303_keeps_the_unscale_a_second_optimizer_depends_on():
    code = _k2_loop("head.apply_gradients(zip(grads, head_vars))", "head = keras.optimizers.SGD(0.1)")
    finding = _unscale_finding(code)
    assert finding.fix is None and "`head`" in finding.message


def test_mp109_keras3_clip_that_cannot_move_into_the_optimizer_gets_the_round_trip():
    base = """
        import keras
        import tensorflow as tf
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, clipnorm=2.0))
        with tf.GradientTape() as tape:
            scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    """
    result = lint(base, 3, fix=False)
    assert codes(result) == ["MP109"]
    # The optimizer already clips (mpfix does not pick one clip), and a threshold computed at run time cannot go into
    # its constructor: the clip stays where it is and acts on unscaled gradients (divided by scale_loss(1.0), the
    # factor apply divides by, and multiplied back so that apply still skips overflowed steps; turn 20).
    computed = base.replace("clipnorm=2.0", "momentum=0.9").replace("(grads, 1.0)", "(grads, args.clip)")
    for code in (base, computed):
        fixed = lint(code, 3).fixed_text
        assert "loss_scale = opt.scale_loss(1.0)" in fixed
        assert "grads = [None if g is None else keras.ops.divide(g, loss_scale) for g in grads]" in fixed
        assert "grads = [None if g is None else keras.ops.multiply(g, loss_scale) for g in grads]" in fixed
        lines = fixed.splitlines()
        clip = next(i for i, line in enumerate(lines) if "clip_by_global_norm" in line)
        assert "divide" in lines[clip - 1] and "multiply" in lines[clip + 1]
        assert codes(lint(fixed, 3, fix=False)) == []  # the fixed step checks clean (no MP110 either)
    # A literal clip with an optimizer that does not clip moves into the optimizer, as the guide writes it.
    moved = lint(base.replace("clipnorm=2.0", "momentum=0.9"), 3).fixed_text
    assert "SGD(0.1, momentum=0.9, global_clipnorm=1.0)" in moved and "clip_by_global_norm" not in moved


def test_mp109_keras2_noise_before_unscale_moves_the_unscale():
    code = """
        import tensorflow as tf
        import tf_keras
        opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
        with tf.GradientTape() as tape:
            scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = [g + tf.random.normal(tf.shape(g), stddev=0.01) for g in grads]
        unscaled = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(unscaled, model.trainable_variables))
    """
    result = lint(code, 2)
    assert codes(lint(code, 2, fix=False)) == ["MP109"]
    assert "grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))" \
        in result.fixed_text
    assert "unscaled = grads\n" in result.fixed_text


@pytest.mark.parametrize("keras", [2, 3])
def test_mp101_names_the_factory_it_cannot_see_into(keras: int):
    code = """
        import tensorflow as tf
        from official.nlp import optimization
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

        def main():
            optimizer = optimization.create_optimizer(3e-5, 1000, 100)
            for x, y in data:
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
    (finding,) = lint(code, keras, fix=False).findings
    assert finding.code == "MP101" and finding.fix is None
    assert "comes from `optimization.create_optimizer(...)`" in finding.message
    assert "cannot see where" not in finding.message


@pytest.mark.parametrize("keras", [2, 3])
def test_mp106_reports_the_build_on_the_strategy_branch_only(keras: int):
    """Keras 3 only: a Keras 2 optimizer built outside the scope trains (test_unseen_strategy_scope.py)."""
    code = """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        if use_strategy:
            strategy = tf.distribute.MirroredStrategy()
            with strategy.scope():
                model = build_model()
            optimizer = tf.keras.optimizers.Adam()
        else:
            strategy = None
            model = build_model()
            optimizer = tf.keras.optimizers.Adam()
    """
    result = lint(code, keras, fix=False)
    assert [(f.code, f.line) for f in result.findings] == ([("MP106", 7)] if keras == 3 else [])


@pytest.mark.parametrize("keras", [2, 3])
def test_gradient_path_rules_stay_silent_on_correct_loops(keras: int):
    scale, unscale = ("scale_loss", "") if keras == 3 else ("get_scaled_loss", "grads = opt.get_unscaled_gradients(grads)")
    code = f"""
        import tensorflow as tf
        import {"keras" if keras == 3 else "tf_keras as keras"}
        keras.mixed_precision.set_global_policy("mixed_float16")
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))

        @tf.function
        def distributed_step(batch):
            def step_fn(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(loss_fn(y, model(x)), global_batch_size=64)
                    scaled = opt.{scale}(loss)
                grads = tape.gradient(scaled, model.trainable_variables)
                grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
                {unscale}
                opt.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(step_fn, args=batch)
    """
    assert codes(lint(code, keras, fix=False)) == []


def test_mp101_names_the_call_in_the_enclosing_function_that_binds_the_optimizer():
    # tf-models' transformer_main: `opt = self._create_optimizer()` in train(), the step nested in it.
    code = """
        import tensorflow as tf
        import tf_keras
        tf_keras.mixed_precision.set_global_policy("mixed_float16")

        class Task:
            def train(self):
                opt = self._create_optimizer()

                @tf.function
                def train_steps(iterator, steps):
                    for _ in tf.range(steps):
                        with tf.GradientTape() as tape:
                            loss = self.loss(next(iterator))
                        grads = tape.gradient(loss, self.tvars)
                        opt.apply_gradients(zip(grads, self.tvars))
                return train_steps
    """
    (finding,) = lint(code, 2, fix=False).findings
    assert "comes from `self._create_optimizer(...)`" in finding.message


def test_mp102_keras3_scaling_a_loop_that_clips_moves_the_clip_or_gives_no_fix():
    code = """
        import keras
        import tensorflow as tf
        keras.mixed_precision.set_global_policy("mixed_float16")
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        grads = [tf.clip_by_value(g, -1.0, 1.0) for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))
    """
    fixed = lint(code, 3).fixed_text
    assert "LossScaleOptimizer(keras.optimizers.SGD(0.1, clipvalue=1.0))" in fixed
    assert "clip_by_value" not in fixed and "scaled_loss = opt.scale_loss(loss)" in fixed
    compiled = """
        import keras
        import tensorflow as tf
        keras.mixed_precision.set_global_policy("mixed_float16")

        class Net(keras.Model):
            def train_step(self, data):
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(data)
                grads = tape.gradient(loss, self.trainable_variables)
                grads, _ = tf.clip_by_global_norm(grads, 1.0)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
    """
    (finding,) = lint(compiled, 3, fix=False).findings
    assert finding.code == "MP102" and finding.fix is None and "scaling alone would clip" in finding.message
    # Keras 2 unscales at the gradient call: the clip then sees unscaled gradients, the fix stays.
    assert lint(compiled.replace("import keras\n", "import tf_keras as keras\n"), 2, fix=False).findings[0].fix


def test_mp303_keeps_the_unscale_when_accumulated_gradients_are_clipped_in_another_function():
    code = """
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))

        def run(model, loss_fn):
            accum_gradients = GradientAccumulator()

            def forward(inputs, labels):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(labels, model(inputs)))
                scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = opt.get_unscaled_gradients(scaled_grads)
                accum_gradients.add_gradients(grads)

            def step():
                (gradients, _) = tf.clip_by_global_norm(accum_gradients.gradients, clip_norm=1.0)
                opt.apply_gradients(zip(gradients, model.trainable_variables))
    """
    # The optimizer is in the file: the clip moves into it (accumulation is linear, the LSO unscales first).
    finding = _unscale_finding(code)
    assert str(finding.fix.safety) == "unsafe" and "moves into the inner optimizer" in finding.message
    fixed = lint(code, 3, rules=MP303).fixed_text
    assert "SGD(0.1, global_clipnorm=1.0)" in fixed and "gradients = accum_gradients.gradients" in fixed
    # Built elsewhere: mpfix cannot move the clip, and keeps the unscale the clip depends on.
    elsewhere = code.replace("opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))",
                             "from training import opt")
    finding = _unscale_finding(elsewhere)
    assert finding.fix is None and "clip_by_global_norm" in finding.message


def test_mp109_keras2_callbacks_before_an_all_reduce_of_scaled_gradients_are_reported_without_a_fix():
    code = """
        import tensorflow as tf
        import tf_keras

        def _run_callbacks(callbacks, grads_and_vars):
            for callback in callbacks:
                grads_and_vars = callback(grads_and_vars)
            return grads_and_vars

        def minimize(tape, optimizer, loss, variables, callbacks):
            with tape:
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads_and_vars = zip(tape.gradient(scaled_loss, variables), variables)
            grads_and_vars = _run_callbacks(callbacks, grads_and_vars)
            grads = tf.distribute.get_replica_context().all_reduce("sum", [g for g, _ in grads_and_vars])
            optimizer.apply_gradients(zip(optimizer.get_unscaled_gradients(grads), variables))
    """
    (finding,) = lint(code, 2, fix=False, policy="mixed_float16").findings
    assert finding.code == "MP109" and finding.fix is None and "callbacks" in finding.message


def test_mp303_renames_get_scaled_loss_only_together_with_its_unscale():
    blocked = _k2_loop("grads = [g + tf.random.normal(tf.shape(g)) for g in grads]")
    findings = lint(blocked, 3, fix=False, rules=MP303).findings
    assert len(findings) == 2 and all(f.fix is None for f in findings)
    assert "needs a hand edit" in next(f.message for f in findings if f.message.startswith("`get_scaled_loss`"))
    # Unblocked: one fix renames the scale and drops the unscale (issue 20: paired edits are one fix).
    fixes = [f.fix for f in lint(_k2_loop("pass"), 3, fix=False, rules=MP303).findings if f.fix is not None]
    assert len(fixes) == 1 and str(fixes[0].safety) == "safe"


def test_mp303_keeps_an_unscale_inside_a_helper_that_feeds_a_second_optimizer():
    code = """
        import tensorflow as tf

        class Trainer:
            def _weight_update(self, gradients):
                gradients = self.mlp_optimizer.get_unscaled_gradients(gradients)
                self.mlp_optimizer.apply_gradients(zip(gradients[:2], self.variables[:2]))
                self.embedding_optimizer.apply_gradients(zip(gradients[2:], self.variables[2:]))

            def train_step(self, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = self.mlp_optimizer.get_scaled_loss(self.loss(y, self.model(x)))
                self._weight_update(tape.gradient(scaled_loss, self.variables))
    """
    finding = _unscale_finding(code)
    assert finding.fix is None and "`self.embedding_optimizer`" in finding.message


def test_keras2_guarded_fix_is_valid_python_with_no_new_undefined_names():
    # The guard names LossScaleOptimizer through the file's own import (tf.keras here, tf_keras in
    # MP102's example), so the fix adds no import and no unbound name.
    from mpfix.fix_validation import undefined_names

    source = FIXTURES.joinpath("library_train_step.k2.in.py").read_text()
    fixed = lint(source, 2).fixed_text
    compile(fixed, "fixed.py", "exec")
    assert undefined_names(fixed) <= undefined_names(source)
    guard = "isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)"
    assert fixed.count(guard) == 2
    assert ImportTable(cst.parse_module(fixed)).resolve(
        cst.parse_expression("tf.keras.mixed_precision.LossScaleOptimizer")) == "keras.mixed_precision.LossScaleOptimizer"
    # `from tensorflow import keras`: the guard is spelled with that name.
    aliased = source.replace("import tensorflow as tf\n", "import tensorflow as tf\nfrom tensorflow import keras\n")
    assert "isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer)" in lint(aliased, 2).fixed_text


def test_keras2_optimizer_built_as_lso_in_the_file_needs_no_guard():
    code = """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
    fixed = lint(code, 2).fixed_text
    assert "isinstance" not in fixed
    assert "grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))" in fixed


def test_keras2_unguardable_gradient_is_reported_without_a_fix():
    # The gradient is not assigned to a name: no place for the guarded unscale, so no fix, and
    # the message says that a plain optimizer has no get_scaled_loss.
    code = FIXTURES.joinpath("library_train_step.k2.in.py").read_text().replace(
        "        gradients = tape.gradient(loss, self.trainable_variables)\n"
        "        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))\n",
        "        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables),"
        " self.trainable_variables))\n")
    (finding,) = lint(code, 2, fix=False).findings
    assert finding.code == "MP102" and finding.fix is None
    assert "a plain Keras 2 optimizer has no `get_scaled_loss`" in finding.message


K2_GUARD_RUN = '''
import json
import sys

import numpy as np
import tensorflow as tf

assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__  # really Keras 2
namespace = {}
exec(compile(sys.argv[1], "fixed.py", "exec"), namespace)
Base = namespace["ContrastiveModel"]


class Net(Base):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)


x = np.ones((16, 4), "float32")
y = np.ones((16, 1), "float32")
out = {}
for policy in ("float32", "mixed_float16"):
    tf.keras.mixed_precision.set_global_policy(policy)
    model = Net()
    model.compile(optimizer="sgd", loss="mse")
    try:
        history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        lso = isinstance(model.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
        out[policy] = ["LSO" if lso else type(model.optimizer).__name__, float(history.history["loss"][-1])]
    except AttributeError as error:
        out[policy] = ["AttributeError", str(error)[:80]]
print(json.dumps(out))
'''


@pytest.mark.slow
@pytest.mark.keras2
def test_keras2_guarded_fix_runs_with_a_plain_and_a_loss_scale_optimizer():
    import json
    import math
    import os
    import subprocess
    import sys

    source = FIXTURES.joinpath("library_train_step.k2.in.py").read_text()
    fixed = lint(source, 2).fixed_text
    # The unguarded form MP102 wrote before: what the library's own float32 runs would hit.
    guard = "isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)"
    unguarded = (fixed.replace(f" if {guard} else loss", "")
                 .replace(f"        if {guard}:\n            gradients =", "        gradients ="))
    assert "isinstance" not in unguarded
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    results = []
    for text in (fixed, unguarded):
        proc = subprocess.run([sys.executable, "-c", K2_GUARD_RUN, text], capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    guarded_run, unguarded_run = results
    assert guarded_run["float32"][0] == "SGD", guarded_run
    # compile wraps under mixed_float16 (as a LossScaleOptimizerV3, which the public class's isinstance accepts).
    assert guarded_run["mixed_float16"][0] == "LSO", guarded_run
    assert all(math.isfinite(v[1]) for v in guarded_run.values()), guarded_run
    assert unguarded_run["float32"][0] == "AttributeError", unguarded_run
    assert unguarded_run["mixed_float16"][0] == "LSO", unguarded_run
