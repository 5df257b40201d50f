"""float16 numerics rules (MP201–MP207): fixture pairs, must-not-flag idioms, exact float16 facts.

Fixture pairs live in ``fixtures/numerics/NAME.in.py`` → ``NAME.out.py``: fixing the input with
every MP2xx rule (unsafe fixes on) must give the output exactly on both Keras generations, and a
second run must change nothing.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.codemods._float16_scope import SAFE_EPSILON, SAFE_MASK, describe_float16, epsilon_vanishes, to_float16
from mpfix.engine import Engine, Options

FIXTURES = Path(__file__).parent / "fixtures" / "numerics"
MP2 = tuple(r for r in all_rules() if r.code.startswith("MP2"))


def lint(code: str, keras: int = 3, *, fix: bool = True, policy: str | None = "mixed_float16"):
    engine = Engine(MP2, Options(keras=str(keras), policy=policy, unsafe_fixes=True, project_policy=False))
    return engine.lint(textwrap.dedent(code).lstrip("\n"), Path("model.py"), fix=fix)


def codes(result) -> list[str]:
    return sorted(f.code for f in result.findings)


PAIRS = sorted(FIXTURES.glob("*.in.py"))


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("source", PAIRS, ids=[p.name.removesuffix(".in.py") for p in PAIRS])
def test_fixture_pair(source: Path, keras: int):
    expected = source.with_name(source.name.replace(".in.py", ".out.py")).read_text()
    result = lint(source.read_text(), keras)
    assert not result.errors, result.errors
    assert result.fixed_text == expected
    again = lint(expected, keras)
    assert again.fixed_text is None
    assert not [f for f in again.findings if f.fix is not None]


def test_attention_block_findings():
    result = lint((FIXTURES / "attention_block.in.py").read_text(), fix=False)
    assert codes(result) == ["MP201", "MP202", "MP203", "MP204", "MP206"]
    messages = {f.code: f.message for f in result.findings}
    assert "becomes -inf" in messages["MP201"]
    assert "1e-8 becomes 0.0" in messages["MP202"]


def test_nothing_without_a_float16_policy():
    for source in PAIRS:
        text = source.read_text().replace('"mixed_float16"', '"float32"')
        assert lint(text, fix=False, policy=None).findings == [], source.name


# Correct float16 code and plain Python that the rules must leave alone.
MUST_NOT_FLAG = {
    "keras3-mask-3e4": """
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, scores, mask):
                return tf.nn.softmax(scores + (1.0 - mask) * -3e4)
    """,
    "hf-mask-1e4": """
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, scores, mask):
                return tf.nn.softmax(tf.where(mask, scores, -1e4))
    """,
    "dtype-guarded-constant": """
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, scores, mask):
                neg = tf.float16.min if scores.dtype == tf.float16 else -1e9
                return scores + (1.0 - mask) * neg
    """,
    "early-return-guard": """
        import tensorflow as tf
        def large_negative(dtype):
            if dtype == tf.float16:
                return tf.float16.min
            return -1e9
        class A(tf.keras.layers.Layer):
            def call(self, scores, mask):
                return scores + (1.0 - mask) * large_negative(scores.dtype)
    """,
    "explicit-float32-compute": """
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, x, mask):
                x32 = tf.cast(x, tf.float32)
                y = tf.nn.softmax(x32 + (1.0 - tf.cast(mask, tf.float32)) * -1e9)
                n = x32 / (tf.norm(x32, axis=-1, keepdims=True) + 1e-8)
                return tf.cast(y + n, x.dtype)
    """,
    "epsilon-on-float32-layer": """
        import tensorflow as tf
        class Block(tf.keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.norm = RMSNorm(epsilon=1e-12, dtype="float32")
                self.ln = tf.keras.layers.LayerNormalization(epsilon=1e-12)
    """,
    "optimizer-epsilon": """
        import tensorflow as tf
        opt = tf.keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-9)
        opt2 = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(epsilon=1e-9))
    """,
    "plain-python-flops": """
        def report(model, flops):
            gflops = flops * 1e-9
            print(f"{gflops:.2f} GFLOPs")
            return gflops + 1e-12
        total = report(None, 3e12)
    """,
    "weights-l2-in-train-step": """
        import tensorflow as tf
        @tf.function
        def train_step(model, x):
            loss = tf.reduce_mean(tf.cast(model(x), tf.float32))
            return loss + 1e-4 * tf.add_n([tf.nn.l2_loss(w) for w in model.trainable_weights])
    """,
    "stable-softmax-by-hand": """
        import tensorflow as tf
        class S(tf.keras.layers.Layer):
            def call(self, x):
                e = tf.exp(x - tf.reduce_max(x, axis=-1, keepdims=True))
                return e / tf.reduce_sum(e, axis=-1, keepdims=True)
    """,
    "float32-output-head": """
        import tensorflow as tf
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8),
                                     tf.keras.layers.Dense(1, dtype="float32")])
    """,
    "compute-dtype-constant": """
        import tensorflow as tf
        class S(tf.keras.layers.Layer):
            def call(self, x):
                return x * tf.cast(tf.shape(x)[-1], self.compute_dtype) ** -0.5
    """,
    # tf-models transformer metrics: `import tensorflow.compat.v1 as tf` spells float32 too.
    "compat-v1-label-smoothing": """
        import tensorflow.compat.v1 as tf
        def padded_cross_entropy_loss(logits, labels, smoothing, vocab_size):
            confidence = 1.0 - smoothing
            low_confidence = (1.0 - confidence) / tf.cast(vocab_size - 1, tf.float32)
            return tf.log(low_confidence + 1e-20)
    """,
    # tf-models video classification: every caller casts the outputs to float32 (then softmaxes).
    "caller-casts-outputs": """
        import tensorflow as tf
        class Task:
            def build_losses(self, labels, model_outputs):
                return -tf.reduce_sum(model_outputs * tf.math.log(model_outputs + 1e-8), -1)
            def train_step(self, features, labels, model):
                outputs = model(features, training=True)
                outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
                outputs = tf.nest.map_structure(tf.math.softmax, outputs)
                return self.build_losses(model_outputs=outputs, labels=labels)
    """,
    "focal-loss-pow": """
        import tensorflow as tf
        def focal_loss(y_true, y_pred, gamma=2.0):
            return tf.pow(1.0 - y_pred, gamma) * y_true
    """,
}


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("name", sorted(MUST_NOT_FLAG))
def test_must_not_flag(name: str, keras: int):
    result = lint(MUST_NOT_FLAG[name], keras, fix=False)
    assert not result.errors, result.errors
    assert [(f.code, f.line, f.message) for f in result.findings] == []


def test_keras2_losses_flagged_keras3_classes_not():
    code = """
        import tensorflow as tf
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        @tf.function
        def train_step(model, x, y):
            return loss_fn(y, model(x, training=True))
    """
    assert codes(lint(code, 2, fix=False)) == ["MP207"]
    assert codes(lint(code, 3, fix=False)) == []


def test_layer_constructor_without_dtype_is_fixed_with_float32():
    code = """
        import tensorflow as tf
        from my_project.layers import RMSNorm
        def build():
            return RMSNorm(epsilon=1e-12)
    """
    assert codes(lint(code, fix=False)) == ["MP202"]
    assert 'RMSNorm(epsilon=1e-12, dtype="float32")' in lint(code).fixed_text


def test_keras2_group_normalization_does_not_upcast():
    # GroupNormalization(epsilon=1e-12) stays finite on constant rows on Keras 3 but not on Keras 2.
    code = """
        import tensorflow as tf
        norm = tf.keras.layers.GroupNormalization(groups=2, epsilon=1e-12)
    """
    assert codes(lint(code, 2, fix=False)) == ["MP202"]
    assert codes(lint(code, 3, fix=False)) == []


def test_softmax_head_fix_is_safe_linear_head_unsafe():
    code = """
        import tensorflow as tf
        a = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="softmax")])
        b = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    """
    safety = sorted(str(f.fix_safety) for f in lint(code, fix=False).findings)
    assert safety == ["safe", "unsafe"]


# -- the float16 numbers behind the rules -------------------------------------------------
def test_float16_rounding_is_exact():
    assert to_float16(65504.0) == 65504.0
    assert to_float16(-1e9) == -math.inf
    assert to_float16(1e-8) == 0.0  # below half the smallest subnormal (2**-25 ≈ 2.98e-8)
    assert to_float16(1e-7) == 2 * 2.0 ** -24  # two subnormal steps: 1.19e-7
    assert describe_float16(1e-12) == "0.0"
    assert describe_float16(1e-7) == "a subnormal 1.19e-07"
    assert describe_float16(-1e30) == "-inf"


def test_epsilon_threshold():
    assert epsilon_vanishes(1e-8) and epsilon_vanishes(1e-12) and epsilon_vanishes(1e-7)
    # 1e-6 is a subnormal within 1.3%, 1e-5 and 1e-3 survive: common layer-norm epsilons.
    assert not epsilon_vanishes(1e-6) and not epsilon_vanishes(1e-5) and not epsilon_vanishes(1e-3)


def test_replacement_constants_are_float16_safe():
    mask = -float(SAFE_MASK)
    assert to_float16(mask) == mask and to_float16(2 * mask) == 2 * mask  # two masks still finite
    assert math.exp(mask) == 0.0  # masked logits vanish from a softmax
    eps = float(SAFE_EPSILON)
    assert to_float16(eps) >= 2.0 ** -14  # a normal float16 number
    assert to_float16(1.0 / eps) < 65504  # x / eps stays finite for |x| <= 1


def test_scope_analysis_is_cached_on_the_context():
    import libcst as cst

    from mpfix.codemods.analysis.dtypes import dtype_analysis
    from mpfix.codemods.base import RuleContext
    from mpfix.codemods.names import ImportTable
    from mpfix.policy import Policy

    module = cst.parse_module("import tensorflow as tf\n")
    context = RuleContext(module=module, path=Path("m.py"), keras=3, policy=Policy.FLOAT16,
                          module_policy=Policy.FLOAT16, imports=ImportTable(module))
    analysis = dtype_analysis(context)
    assert context.cache["dtypes"] is analysis
    assert dtype_analysis(context) is analysis
