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
    # Label smoothing: `low` mixes with tf.cast(..., tf.float32), so it is float32 (TF never promotes).
    "label-smoothing-float32-by-use": """
        import tensorflow as tf

        def smoothing_loss(logits, labels, smoothing, vocab_size):
            confidence = 1.0 - smoothing
            low = (1.0 - confidence) / tf.cast(vocab_size - 1, tf.float32)
            return -(confidence * tf.math.log(confidence) + low * tf.math.log(low + 1e-20))
    """,
    # Optimizer and regularizer code sees float32 variables, whatever the compute policy.
    "optimizer-and-regularizer-state": """
        import tensorflow as tf

        class Muon(tf.keras.optimizers.Optimizer):
            def update_step(self, gradient, variable, learning_rate):
                x = gradient / (tf.norm(gradient) + 1e-7)
                variable.assign_sub(learning_rate * x)

        class OrthogonalRegularizer(tf.keras.regularizers.Regularizer):
            def __call__(self, inputs):
                inputs = tf.math.l2_normalize(inputs, axis=0)
                return tf.reduce_sum(tf.matmul(tf.transpose(inputs), inputs))
    """,
    # Sharpness-aware minimisation: gradients of float32 variables are float32.
    "sam-gradients-float32": """
        import tensorflow as tf

        class SAM(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compiled_loss(y, self(x))
                gradients = tape.gradient(loss, self.trainable_variables)
                norm = self._norm(gradients)
                return self.rho / (norm + 1e-12)

            def _norm(self, gradients):
                return tf.norm(tf.stack([tf.norm(g) for g in gradients if g is not None]))
    """,
    # IoU: `neg_log_iou * mask32` only runs if iou, and the areas it is made of, are float32.
    "iou-float32-by-use": """
        import tensorflow as tf

        def iou_loss(pred, target, mask):
            inter = tf.minimum(pred, target)
            union = pred + target - inter
            iou = inter / (union + 1e-8)
            mask32 = tf.cast(mask, tf.float32)
            neg_log_iou = -tf.math.log(iou)
            return tf.reduce_sum(neg_log_iou * mask32)
    """,
    # A model from another file's factory (tf-models' ResNet ends in a float32 softmax there): unknown, and unknown is silent.
    "model-from-another-files-factory": """
        import tensorflow as tf
        from project.models import resnet50

        class Runner:
            def __init__(self):
                self.model = resnet50(num_classes=10)

            def train_step(self, images, labels):
                logits = self.model(images, training=True)
                return tf.keras.losses.sparse_categorical_crossentropy(labels, logits)
    """,
    # Outputs cast to float32 by every caller before the loss function sees them.
    "outputs-cast-by-every-caller": """
        import tensorflow as tf

        class Task:
            def build_losses(self, labels, model_outputs):
                return tf.keras.losses.sparse_categorical_crossentropy(labels, model_outputs)

            def train_step(self, inputs, labels, model):
                outputs = model(inputs, training=True)
                outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
                return self.build_losses(labels=labels, model_outputs=outputs)
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


def test_imported_norm_layer_is_reported_without_a_fix_its_name_is_the_only_evidence():
    # Only `RMSNorm`'s name says it is a normalisation layer computing in the compute dtype: a
    # finding that rests on a name gets no fix (heuristics.NORM_LAYER_NAME).
    code = """
        import tensorflow as tf
        from my_project.layers import RMSNorm
        def build():
            return RMSNorm(epsilon=1e-12)
    """
    found = lint(code, fix=False)
    assert codes(found) == ["MP202"]
    assert found.findings[0].fix is None


def test_layer_of_this_file_without_dtype_is_fixed_with_float32():
    code = """
        import tensorflow as tf
        class RMSNorm(tf.keras.layers.Layer):
            def __init__(self, epsilon=1e-6, **kwargs):
                super().__init__(**kwargs)
                self.epsilon = epsilon
            def call(self, x):
                return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + self.epsilon)
        def build():
            return RMSNorm(epsilon=1e-12)
    """
    assert codes(lint(code, fix=False)) == ["MP202", "MP203"]  # MP203: the float16 mean of squares (turn 10)
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
        a.compile(loss="categorical_crossentropy")
        b.compile(loss="mse")
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


def test_dtype_facts_are_cached_on_the_context():
    import libcst as cst

    from mpfix.codemods.facts.dtype_facts import dtype_facts
    from mpfix.codemods.base import RuleContext
    from mpfix.codemods.names import ImportTable
    from mpfix.policy import Policy

    module = cst.parse_module("import tensorflow as tf\n")
    context = RuleContext(module=module, path=Path("m.py"), keras=3, policy=Policy.FLOAT16,
                          module_policy=Policy.FLOAT16, imports=ImportTable(module))
    facts = dtype_facts(context)
    assert dtype_facts(context) is facts  # computed once per file, shared by every float16 rule


# -- issue 12: each defect class on the float16 rules, reproduced ---------------------------
# Defect 2: deliberate float32 islands, float32 signatures, layers that do not autocast, complex,
# bounded exp arguments, caller-cast values, infinities. None of these may be reported.
ISLANDS = {
    "rotary-embedding-keras-ops": """
        from keras import layers, ops
        class Rotary(layers.Layer):
            def __init__(self, dim, **kwargs):
                super().__init__(**kwargs)
                self.dim = dim
            def _inverse_frequencies(self, dim):
                idx = ops.arange(0, dim, 2, dtype="float32")
                denom = ops.cast(dim, "float32")
                return 1.0 / (10000.0 ** (idx / denom))
            def call(self, x):
                freqs = self._inverse_frequencies(self.dim)
                return x * ops.cast(freqs, x.dtype)
    """,
    "anchor-generator-tf": """
        import tensorflow as tf
        class Anchors(tf.keras.layers.Layer):
            def call(self, features):
                size = tf.shape(features)[1]
                grid = tf.range(size, dtype=tf.float32) / tf.cast(size, tf.float32)
                centers = tf.linspace(0.0, 1.0, 8) * grid[0]
                return centers + tf.random.normal([8]) * 1e-9
    """,
    "float32-input-signature": """
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
        def serve(x):
            return tf.exp(x) / tf.reduce_sum(tf.exp(x), axis=-1, keepdims=True) + 1e-12
    """,
    "autocast-false-feature-layer": """
        import tensorflow as tf
        class LogMel(tf.keras.layers.Layer):
            def __init__(self, **kwargs):
                super().__init__(autocast=False, **kwargs)
            def call(self, audio):
                power = tf.reduce_sum(tf.square(audio), axis=-1)
                return tf.math.log(power + 1e-12) + tf.exp(audio)
    """,
    "complex-phase": """
        import math
        import tensorflow as tf
        class Shift(tf.keras.layers.Layer):
            def call(self, x, phase):
                rotation = tf.exp(2j * math.pi * tf.cast(phase, tf.complex64))
                return tf.math.real(tf.signal.fft(tf.cast(x, tf.complex64)) * rotation)
    """,
    "gaussian-exp": """
        import tensorflow as tf
        class RBF(tf.keras.layers.Layer):
            def call(self, x):
                return tf.exp(-x ** 2) + tf.exp(-tf.square(x) / (2.0 * 0.5 ** 2))
    """,
    "positional-exp": """
        import math
        import tensorflow as tf
        class Positions(tf.keras.layers.Layer):
            def call(self, x, d_model=512):
                i = tf.range(d_model // 2)
                inv = tf.exp(-math.log(10000.0) * i / d_model)
                return x * tf.cast(inv, x.dtype)
    """,
    "minus-inf-in-where": """
        from keras import layers, ops
        class Pool(layers.Layer):
            def call(self, scores, mask):
                scores = ops.where(mask, scores, float("-inf"))
                return ops.softmax(scores)
    """,
    "caller-casts-to-float32": """
        import tensorflow as tf
        def masked_logits(logits, mask):
            return logits + (1.0 - mask) * -1e9
        @tf.function
        def train_step(model, x, mask):
            logits = tf.cast(model(x), tf.float32)
            return masked_logits(logits, tf.cast(mask, tf.float32))
    """,
    "float32-helper-from-this-file": """
        import tensorflow as tf
        def get_padding(ids):
            return tf.cast(tf.equal(ids, 0), tf.float32)
        def attention_bias(ids):
            return get_padding(ids) * -1e9
        class Encoder(tf.keras.layers.Layer):
            def call(self, x, ids):
                return x
    """,
    "float32-layer-attribute": """
        import tensorflow as tf
        class Block(tf.keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.norm = tf.keras.layers.Dense(4, dtype="float32")
            def call(self, x):
                h = self.norm(x)
                return h / (tf.norm(h, axis=-1, keepdims=True) + 1e-8)
    """,
    # Keras' own op implementations are called on whatever the user passes: never autocast.
    "keras-op-implementation": """
        from keras.src import backend
        from keras.src.ops.operation import Operation
        class Norm(Operation):
            def call(self, x):
                x = backend.convert_to_tensor(x)
                return backend.linalg.norm(x, axis=-1)
    """,
    # A layer that casts its inputs to float32 first (BatchNormalization): its helpers see float32.
    "upcasting-layer-helper": """
        import tensorflow as tf
        class BatchNorm(tf.keras.layers.Layer):
            def call(self, inputs):
                if self.compute_dtype in ("float16", "bfloat16"):
                    inputs = tf.cast(inputs, tf.float32)
                mean, var = self._moments(inputs)
                return (inputs - mean) * tf.math.rsqrt(var + 1e-3)
            def _moments(self, inputs):
                mean = tf.reduce_mean(inputs, axis=0)
                return mean, tf.reduce_sum(tf.square(inputs - mean), axis=0)
    """,
    # A metric function wrapped by a MeanMetricWrapper: the wrapper casts y_pred to float32.
    "wrapped-metric-function": """
        import tensorflow as tf
        def cosine_similarity(y_true, y_pred, axis=-1):
            y_true = tf.linalg.l2_normalize(y_true, axis=axis)
            y_pred = tf.linalg.l2_normalize(y_pred, axis=axis)
            return tf.reduce_sum(y_true * y_pred, axis=axis)
        class CosineSimilarity(tf.keras.metrics.MeanMetricWrapper):
            def __init__(self, name="cosine_similarity", dtype=None, axis=-1):
                super().__init__(cosine_similarity, name, dtype=dtype, axis=axis)
    """,
    # Cast to float32 where needed: on the float16 path the value is float32.
    "conditional-cast-to-float32": """
        import tensorflow as tf
        def pairwise_loss(embeddings, labels):
            convert = embeddings.dtype == tf.float16
            precise = tf.cast(embeddings, tf.float32) if convert else embeddings
            distances = tf.reduce_sum(tf.square(precise), axis=-1)
            return tf.math.log1p(tf.math.exp(distances)) + 1e-12 * tf.reduce_sum(precise)
    """,
    # addons' triplet loss: the embeddings are cast to float32 where needed, then a callable
    # parameter and a same-file helper map them; everything downstream is float32.
    "float32-through-helpers": """
        import tensorflow as tf
        def _masked_maximum(data, mask):
            return tf.reduce_max(data * mask, axis=1, keepdims=True)
        def triplet_hard_loss(y_true, y_pred, distance_metric="L2"):
            embeddings = tf.convert_to_tensor(y_pred)
            convert = embeddings.dtype == tf.float16
            precise = tf.cast(embeddings, tf.float32) if convert else embeddings
            pdist = distance_metric(precise)
            mask = tf.cast(tf.equal(y_true, tf.transpose(y_true)), tf.float32)
            hard_positives = _masked_maximum(pdist, mask)
            return tf.math.log1p(tf.math.exp(hard_positives - 1.0))
    """,
    # tf-models' video_ssl: a library's loss helper with no caller here; the task that calls it (in
    # another module) casts the model's outputs to float32 first.
    "loss-helper-without-a-caller-here": """
        import tensorflow as tf
        def contrastive_loss(hidden, num_replicas, normalize_hidden=True):
            if normalize_hidden:
                hidden = tf.math.l2_normalize(hidden, -1)
            logits = tf.matmul(hidden, hidden, transpose_b=True)
            return logits - tf.eye(tf.shape(hidden)[0]) * 1e9
    """,
    # A layer that computes in float32 (its constructor passes dtype="float32" up, or every
    # construction does): its call sees float32 inputs.
    "float32-layer-class": """
        import tensorflow as tf
        class LossLayer(tf.keras.layers.Layer):
            def __init__(self, **kwargs):
                super().__init__(dtype="float32", **kwargs)
            def call(self, logits):
                return tf.exp(logits) / tf.reduce_sum(tf.exp(logits), axis=-1, keepdims=True)
        class Head(tf.keras.layers.Layer):
            def call(self, x):
                return x / (tf.norm(x, axis=-1, keepdims=True) + 1e-8)
        head = Head(dtype="float32")
    """,
}


def test_loss_helper_called_here_on_model_outputs_is_checked():
    code = """
        import tensorflow as tf
        def contrastive_loss(hidden):
            return tf.math.l2_normalize(hidden, -1)
        @tf.function
        def train_step(model, x):
            return contrastive_loss(model(x, training=True))
    """
    assert codes(lint(code, fix=False)) == ["MP202"]


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("name", sorted(ISLANDS))
def test_float32_islands_are_left_alone(name: str, keras: int):
    result = lint(ISLANDS[name], keras, fix=False)
    assert not result.errors, result.errors
    assert [(f.code, f.line, f.message) for f in result.findings] == []


# Defect 3: hazards the per-rule reasoning missed (keras.ops spellings, attributes, closures,
# tuple outputs, clip bounds, boolean masks).
HAZARDS = {
    "mask-value-constructor-default": ("""
        import tensorflow as tf
        class Attention(tf.keras.layers.Layer):
            def __init__(self, mask_value=-1e9, **kwargs):
                super().__init__(**kwargs)
                self.mask_value = mask_value
            def call(self, scores, mask):
                return tf.nn.softmax(scores + (1.0 - mask) * self.mask_value)
    """, ["MP201"], "mask_value=-3e4"),
    "layernorm-epsilon-default": ("""
        import tensorflow as tf
        class LayerNorm(tf.keras.layers.Layer):
            def __init__(self, epsilon=1e-8, **kwargs):
                super().__init__(**kwargs)
                self.epsilon = epsilon
            def call(self, x):
                mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
                return (x - mean) * tf.math.rsqrt(var + self.epsilon)
    """, ["MP202"], "epsilon=1e-4"),
    "keras-ops-where": ("""
        from keras import layers, ops
        class A(layers.Layer):
            def call(self, scores, mask):
                return ops.softmax(ops.where(mask, scores, -1e9))
    """, ["MP201"], "-3e4"),
    "keras-ops-exp": ("""
        from keras import layers, ops
        class A(layers.Layer):
            def call(self, x):
                return ops.exp(x) / ops.sum(ops.exp(x), axis=-1, keepdims=True)
    """, ["MP204"], "ops.softmax(x, axis=-1)"),
    "keras-ops-sum-square": ("""
        from keras import layers, ops
        class A(layers.Layer):
            def call(self, x):
                return x * ops.rsqrt(ops.sum(ops.square(x), axis=-1, keepdims=True) + 1.0)
    """, ["MP203"], 'ops.square(ops.cast(x, "float32"))'),
    # Called bare on the model's float16 predictions: compile(loss=...) would convert them to
    # float32 first on Keras 3 (C24, tests/rules/test_numerics_classes.py).
    "clip-lower-bound": ("""
        from keras import ops
        def cross_entropy_loss(y_true, y_pred):
            return -ops.sum(y_true * ops.log(ops.clip(y_pred, 1e-10, 1.0)), axis=-1)
        def train_step(model, x, y):
            return cross_entropy_loss(y, model(x, training=True))
    """, ["MP202"], "1e-4"),
    "nested-closure": ("""
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, scores, mask):
                def apply_mask(s, m):
                    return s + m * -1e9
                return tf.nn.softmax(apply_mask(scores, 1.0 - mask))
    """, ["MP201"], "-3e4"),
    "boolean-mask-combination": ("""
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, scores, padding, causal):
                keep = tf.logical_and(padding > 0, causal > 0)
                return tf.nn.softmax(tf.where(keep, scores, -1e9))
    """, ["MP201"], "-3e4"),
    "model-tuple-output": ("""
        import tensorflow as tf
        @tf.function
        def train_step(model, x, y):
            logits, features = model(x, training=True)
            norm = features / (tf.norm(features, axis=-1, keepdims=True) + 1e-8)
            return tf.keras.losses.mean_squared_error(y, logits) + tf.reduce_mean(norm)
    """, ["MP202", "MP203", "MP207"], "1e-4"),
    # From reading real code (benchmarks/precision/hazards.tsv).
    "clip-lower-bound-divisor": ("""
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, x):
                return x / tf.clip_by_value(x, 1e-10, 1.0)
    """, ["MP202"], "1e-4"),
    "epsilon-after-moments": ("""
        import tensorflow as tf
        class WeightNorm(tf.keras.layers.Layer):
            def call(self, inputs):
                x_init = self.layer(inputs)
                m, v = tf.nn.moments(x_init, axes=[0])
                return x_init * (1.0 / tf.math.sqrt(v + 1e-10))
    """, ["MP202"], "1e-4"),
    "merge-layer-l2-normalize": ("""
        import tensorflow as tf
        class Dot(tf.keras.layers.Layer):
            def call(self, inputs):
                return self._merge_function(inputs)
            def _merge_function(self, inputs):
                x1, x2 = inputs[0], inputs[1]
                x1 = tf.linalg.l2_normalize(x1, axis=-1)
                return tf.reduce_sum(x1 * x2, axis=-1)
    """, ["MP202"], "tf.cast(x1, tf.float32)"),
    "module-compute-dtype-mask": ("""
        import tensorflow as tf
        class Attention(tf.Module):
            def __init__(self, compute_dtype=tf.float32):
                super().__init__()
                self.compute_dtype = compute_dtype
            def __call__(self, scores, mask):
                return scores + (1.0 - tf.cast(mask, self.compute_dtype)) * -1e9
    """, ["MP201"], "-3e4"),
    "variable-dtype-epsilon": ("""
        import tensorflow as tf
        class FRN(tf.keras.layers.Layer):
            def call(self, x):
                nu2 = tf.reduce_mean(tf.square(x), axis=[1, 2], keepdims=True)
                epsilon = tf.cast(1e-6, self.dtype)
                return x * tf.math.rsqrt(nu2 + epsilon)
    """, ["MP203", "MP206"], "tf.cast(1e-6, self.compute_dtype)"),  # MP203: nu2, a float16 mean of squares (turn 10)
    "merge-hook-of-an-imported-base": ("""
        import tensorflow as tf
        from tf_keras.src.layers.merging.base_merge import _Merge
        class Dot(_Merge):
            def _merge_function(self, inputs):
                x1 = inputs[0]
                x1 = tf.linalg.l2_normalize(x1, axis=-1)
                return tf.reduce_sum(x1 * inputs[1], axis=-1)
    """, ["MP202"], "tf.cast(x1, tf.float32)"),
    "learned-epsilon-added": ("""
        import tensorflow as tf
        class FRN(tf.keras.layers.Layer):
            def call(self, inputs):
                epsilon = tf.math.abs(tf.cast(self.epsilon, dtype=self.dtype))
                epsilon += tf.math.abs(self.eps_learned)
                nu2 = tf.reduce_mean(tf.square(inputs), axis=[1, 2], keepdims=True)
                return inputs * tf.math.rsqrt(nu2 + epsilon)
    """, ["MP203", "MP206"], "dtype=self.compute_dtype"),  # MP203: nu2 (turn 10)
    "function-handed-on-by-a-layer": ("""
        import functools
        import tensorflow as tf
        def _monotonic(p_choose_i, previous):
            cumprod = tf.math.cumprod(1 - p_choose_i, axis=1, exclusive=True)
            return p_choose_i * cumprod * tf.cumsum(previous / tf.clip_by_value(cumprod, 1e-10, 1.0), axis=1)
        class Monotonic(tf.keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.probability_fn = functools.partial(_monotonic)
            def call(self, score, state):
                return self.probability_fn(score, state)
    """, ["MP202", "MP203"], "1e-4"),  # MP203: the cumsum of float16 values (issue 18 class: cumsum overflows)
    "module-subclass-through-a-base": ("""
        import tensorflow as tf
        class Module(tf.Module):
            pass
        class Transformer(Module):
            def __init__(self, compute_dtype=tf.float32):
                super().__init__()
                self.compute_dtype = compute_dtype
            def encode(self, tokens, mask):
                return (1.0 - tf.cast(mask, self.compute_dtype)) * -1e9
            def __call__(self, tokens, mask):
                return self.encode(tokens, mask)
    """, ["MP201"], "-3e4"),
}


@pytest.mark.parametrize("name", sorted(HAZARDS))
def test_hazards_are_found(name: str):
    code, expected, fixed = HAZARDS[name]
    result = lint(code, 3, fix=False)
    assert not result.errors, result.errors
    assert codes(result) == expected
    assert fixed in lint(code, 3).fixed_text


# Defect 4: fixes follow the Keras generation's autocast rules.
def test_tf_keras_second_call_argument_is_not_assumed_float16():
    # tf_keras autocasts only `inputs`: `mask` keeps the caller's dtype, so nothing can be said
    # about `mask * -1e9` alone, while Keras 3 autocasts it to float16.
    code = """
        import tensorflow as tf
        class A(tf.keras.layers.Layer):
            def call(self, inputs, mask):
                bias = mask * -1e9
                return bias
    """
    assert codes(lint(code, 3, fix=False)) == ["MP201"]
    assert codes(lint(code, 2, fix=False)) == []


def test_a_constant_that_meets_float32_is_mp206s_mix_not_an_overflow():
    # tfm multi_channel_attention, addons MultiHeadAttention: the mask is float32 here, so -1e9 is
    # float32 too; what breaks is float16 + float32 (MP206). Once MP206's fix makes the mask the
    # compute dtype, the next fix pass finds the constant.
    code = """
        import tensorflow as tf
        class Attention(tf.keras.layers.Layer):
            def call(self, logits, mask):
                mask = tf.cast(mask, tf.float32)
                logits += -10e9 * (1.0 - mask)
                return tf.nn.softmax(logits)
    """
    result = lint(code, 3, fix=False)
    assert codes(result) == ["MP206"]
    fixed = lint(code, 3).fixed_text
    assert "tf.cast(mask, self.compute_dtype)" in fixed and "-3e4 * (1.0 - mask)" in fixed

@pytest.mark.parametrize("keras", [2, 3])
def test_a_mask_cast_to_float32_then_reshaped_under_a_condition_stays_float32(keras):
    # The mask is cast to float32, then maybe given a heads axis: every value it can hold is
    # float32, so the constant's arithmetic is float32 (no MP201); the float32 term meets the
    # float16 scores (MP206), on both Keras generations.
    code = """
        import tensorflow as tf
        class Attention(tf.keras.layers.Layer):
            def call(self, inputs, mask=None):
                scores = tf.einsum("bnd,bmd->bnm", inputs, inputs)
                if mask is not None:
                    mask = tf.cast(mask, tf.float32)
                    if len(mask.shape) != len(scores.shape):
                        mask = tf.expand_dims(mask, 1)
                    scores += -1e9 * (1.0 - mask)
                return tf.nn.softmax(scores)
    """
    result = lint(code, keras, fix=False)
    # MP203 on line 4 too: einsum("bnd,bmd->bnm", inputs, inputs) is a self-product, whose diagonal
    # sums squares (issue 18 class: einsum self-products are squares).
    assert [(f.code, f.line) for f in result.findings] == [("MP203", 4), ("MP206", 9)], result.findings


def test_mp206_fix_never_makes_a_float32_island_a_mix():
    code = """
        import tensorflow as tf
        class Rel(tf.keras.layers.Layer):
            def call(self, x):
                pos = tf.range(8, dtype=tf.float32)
                scale = tf.cast(tf.shape(x)[-1], tf.float32)
                rel = pos / scale
                return x * rel
    """
    result = lint(code, 3, fix=False)
    assert codes(result) == ["MP206"]
    # Changing only `pos` to the compute dtype would make `pos / scale` float16 / float32: the
    # finding comes without a fix rather than with one that raises.
    assert result.findings[0].fix is None
    assert lint(code, 3).fixed_text is None


# Defect 5 (dtype part): fixes in the module's own spelling, effective, never a new mix.
def test_backend_agnostic_module_gets_keras_ops_casts():
    code = """
        from keras import layers, ops
        class Act(layers.Layer):
            def call(self, h):
                self.add_loss(1e-4 * ops.sum(h * h))
                return h
    """
    fixed = lint(code, 3).fixed_text
    assert 'ops.sum(ops.cast(h, "float32") * ops.cast(h, "float32"))' in fixed
    assert "tf." not in fixed


def test_sum_of_squares_is_not_cast_back_before_rsqrt():
    code = """
        import tensorflow as tf
        class RMS(tf.keras.layers.Layer):
            def call(self, x):
                ms = tf.reduce_sum(tf.square(x), axis=-1, keepdims=True)
                return x * tf.math.rsqrt(ms + 1.0)
    """
    result = lint(code, 3, fix=False)
    assert codes(result) == ["MP203"]
    assert result.findings[0].fix is None  # casting `ms` back to float16 would overflow all the same


def test_fixes_make_no_new_dtype_mix():
    import libcst as cst

    from mpfix.codemods.facts.dtype_facts import new_mixes as new_dtype_mixes

    for source in [*PAIRS, *[None]]:
        if source is None:
            continue
        text = source.read_text()
        fixed = lint(text, 3).fixed_text
        assert new_dtype_mixes(cst.parse_module(text), cst.parse_module(fixed)) == [], source.name


def test_mp205_reports_heads_that_feed_a_loss_or_leave_a_factory():
    trained_here = """
        import tensorflow as tf
        inputs = tf.keras.Input((4,))
        head = tf.keras.layers.Dense(1)(inputs)
        model = tf.keras.Model(inputs, head)
        model.compile(optimizer="sgd", loss="mse")
    """
    exported_only = trained_here.replace('model.compile(optimizer="sgd", loss="mse")', 'model.save("m.keras")')
    factory_pair = """
        import tensorflow as tf
        def create_model():
            inputs = tf.keras.Input((4,))
            features = tf.keras.layers.Dense(8, activation="relu")(inputs)
            probs = tf.keras.layers.Dense(3, activation="softmax")(features)
            return tf.keras.Model(inputs, probs), tf.keras.Model(inputs, features)
    """
    factory_logits = factory_pair.replace('activation="softmax"', "activation=None")
    assert codes(lint(trained_here, fix=False)) == ["MP205"]
    assert codes(lint(exported_only, fix=False)) == []
    assert codes(lint(factory_pair, fix=False)) == ["MP205"]
    # A linear head of a model trained elsewhere: callers may cast the logits before the loss.
    assert codes(lint(factory_logits, fix=False)) == []


_TOY_HEAD = """
    import tensorflow as tf
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
"""


@pytest.mark.parametrize("name", ["model_test.py", "test_model.py", "tests/helpers.py", "conftest.py"])
def test_mp205_leaves_toy_models_in_test_code_alone(name):
    engine = Engine(MP2, Options(keras="3", policy="mixed_float16", project_policy=False))
    code = textwrap.dedent(_TOY_HEAD).lstrip("\n")
    assert codes(engine.lint(code, Path("pkg") / name)) == []
    assert codes(engine.lint(code, Path("pkg") / "train.py")) == ["MP205"]


def test_mp205_factory_only_tests_call_is_a_test_helper(tmp_path):
    (tmp_path / ".git").mkdir()
    lib = tmp_path / "lib"
    lib.mkdir()
    factory = textwrap.dedent("""
        import tensorflow as tf

        def make_classifier():
            inputs = tf.keras.Input((4,))
            probs = tf.keras.layers.Dense(3, activation="softmax")(inputs)
            return tf.keras.Model(inputs, probs)

        def fit_classifier(x, y):
            model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax")])
            model.compile(optimizer="sgd", loss="categorical_crossentropy")
            return model.fit(x, y)
    """).lstrip("\n")
    (lib / "helpers.py").write_text(factory)
    (lib / "helpers_test.py").write_text("from lib.helpers import fit_classifier, make_classifier\n\n"
                                         "def test_it():\n    assert make_classifier() is not None\n"
                                         "    fit_classifier([[1.0]], [[0.0, 1.0, 0.0]])\n")
    engine = Engine(MP2, Options(keras="3", policy="mixed_float16", project_policy=False))
    assert codes(engine.lint(factory, lib / "helpers.py")) == []
    # Called from code that is not a test as well: the factory's model is a real one.
    (lib / "train.py").write_text("from lib.helpers import make_classifier\nmodel = make_classifier()\n")
    engine = Engine(MP2, Options(keras="3", policy="mixed_float16", project_policy=False))
    from mpfix import policy

    policy.forget_projects()  # the project's callers changed (the editor server does the same)
    assert codes(engine.lint(factory, lib / "helpers.py")) == ["MP205"]


# -- MP203: only the Euclidean/Frobenius norm sums squares ------------------------------------
_NORM_LAYER = """
    import tensorflow as tf
    import keras

    class Distances(tf.keras.layers.Layer):
        def call(self, d):
            return {expr}
"""


@pytest.mark.parametrize("expr", [
    "tf.norm(d, 1, axis=2)",
    'tf.norm(d, ord=float("inf"), axis=2)',
    "tf.linalg.norm(d, ord=1, axis=-1)",
    "tf.norm(d, ord=np_inf, axis=-1)",
    "keras.ops.norm(d, ord=1, axis=-1)",
    'keras.ops.norm(d, ord="nuc", axis=(1, 2))',
])
def test_mp203_non_euclidean_norms_do_not_square(expr):
    result = lint(_NORM_LAYER.format(expr=expr), fix=False)
    assert "MP203" not in codes(result)


@pytest.mark.parametrize("expr", [
    "tf.norm(d, axis=2)",
    "tf.norm(d, 2, axis=2)",
    "tf.norm(d, 'euclidean')",
    "tf.linalg.norm(d, ord='fro', axis=(1, 2))",
    "keras.ops.norm(d, ord=None, axis=-1)",
    "keras.ops.norm(d, axis=-1)",
])
def test_mp203_euclidean_norms_still_reported(expr):
    result = lint(_NORM_LAYER.format(expr=expr), fix=False)
    assert codes(result) == ["MP203"]


# -- MP204: x - reduce_max(x) is ≤ 0 (the stable softmax / logsumexp shift) --------------------
_EXP_LAYER = """
    import tensorflow as tf
    import keras
    from keras import ops

    class Soft(tf.keras.layers.Layer):
        def call(self, d):
            {body}
"""


@pytest.mark.parametrize("body", [
    "m = tf.stop_gradient(tf.reduce_max(d, 1, keepdims=True))\n            return tf.math.exp(d - m)",
    "m = tf.math.reduce_max(d, axis=-1, keepdims=True)\n            return tf.exp(d - m)",
    "m = keras.ops.max(d, axis=-1, keepdims=True)\n            return keras.ops.exp(d - m)",
    "m = ops.amax(d, axis=-1, keepdims=True)\n            return ops.exp(d - m)",
    "s = d * 2.0\n            m = tf.stop_gradient(tf.reduce_max(s, 1, keepdims=True))\n            return tf.exp(s - m)",
    "e = tf.exp(d - tf.stop_gradient(tf.reduce_max(d, -1, keepdims=True)))\n            return e / tf.reduce_sum(e, -1)",
    "m = tf.stop_gradient(tf.reduce_max(d, 1, keepdims=True))\n"
    "            e = tf.exp(d - m)\n            return e / tf.reduce_sum(e, 1, keepdims=True)",
])
def test_mp204_minus_own_max_is_bounded(body):
    result = lint(_EXP_LAYER.format(body=body), fix=False)
    assert "MP204" not in codes(result)


@pytest.mark.parametrize("body", [
    # The maximum of another tensor bounds nothing.
    "m = tf.reduce_max(d * 0.5, 1, keepdims=True)\n            return tf.exp(d - m)",
    "m = tf.reduce_min(d, 1, keepdims=True)\n            return tf.exp(d - m)",
    # `m` has two values: which one reaches exp is not known.
    "m = tf.reduce_max(d, 1, keepdims=True)\n            m = m * 0.5\n            return tf.exp(d - m)",
    # `s` is reassigned after its maximum was taken.
    "s = d * 2.0\n            m = tf.reduce_max(s, 1, keepdims=True)\n            s = s * 10.0\n"
    "            return tf.exp(s - m)",
])
def test_mp204_other_shifts_are_still_reported(body):
    result = lint(_EXP_LAYER.format(body=body), fix=False)
    assert "MP204" in codes(result)
