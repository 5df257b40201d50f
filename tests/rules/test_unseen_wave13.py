"""Classes found missing (or wrongly reported, or wrongly fixed) on wave 13 of ``benchmarks/unseen`` (turn 17,
scored before tuning: bugs 3/6, findings right 6/10, 1 wrong fix of 3).

1. session_sampled_softmax_k2_ok.py (correct): a Model subclass whose ``call`` returns ``self.project(...)``, a
   Dense(64) session embedding; its ``train_step`` multiplies it with float16 item embeddings (``tf.matmul``) and
   casts the logits to float32 for the loss. MP205 called the Dense the model's linear head and its fix
   (``dtype="float32"``) broke the script (ran, TF 2.21 CPU: TypeError "Input 'b' of 'MatMul' Op has type float16
   that does not match type float32"). The fact missing: an output that meets another float16 tensor in a
   TensorFlow op that refuses mixed dtypes is a feature of float16 compute, not the prediction a loss sees.
2. stft_frontend_k2.py: a tf_keras log-mel layer calls ``tf.signal.stft`` on the autocast float16 waveform: ValueError
   "RFFT requires tf.float32 or tf.float64 inputs" when the model is built. The fact missing (ops table,
   ``float16_kernel=False``): the tf.signal FFT family (stft, rfft, rfft2d/3d, dct, idct, mfccs) and keras.ops'
   stft/rfft refuse float16 (probed on TF 2.21 CPU, eager and traced; frame, hann_window and
   linear_to_mel_weight_matrix accept it). MP208, no fix.
3. gnn_sum_agg_k3.py: a Keras 3 graph layer sums float16 messages per destination node with ``ops.segment_sum``:
   hubs of in-degree ~4300 make the sums inf (loss frozen, then nan; float32 sums: 6.03 -> 0.0029). The fact missing:
   a segment sum, like a cumsum, adds as many terms as the data gives it (a node's degree, a sequence's length),
   not a width the model fixes: MP203 reports it as it reports a float16 cumsum (no fix).
4. two_tower_logq_k2.py: ``log(cast(prob, logits.dtype))`` narrows a sampling probability (~1e-9 for new items) to
   float16 before the log: below ~3e-8 it is 0 and the log -inf (loss nan; log in float32: 6.28 -> 3.39). The fact
   missing: the log of a value narrowed to float16 loses what the log would have kept (|log| < 104 for any
   positive float32): MP204, fixed by taking the log before the cast.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP2 = tuple(r for r in all_rules() if r.code.startswith("MP2"))


def lint(code: str, keras: str = "3", rules=MP2, fix: bool = True):
    code = textwrap.dedent(code).lstrip("\n")
    compile(code, "train.py", "exec")
    return Engine(rules, Options(keras=keras, project_policy=False, unsafe_fixes=True)).lint(
        code, Path("train.py"), fix=fix)


def found(code: str, keras: str = "3", only: str = "MP2") -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint(code, keras, fix=False).findings if f.code.startswith(only))


# 1. A subclassed model's output multiplied with float16 embeddings in its train_step.
SESSION = """
    {imports}


    class SessionModel(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.item_embedding = keras.layers.Embedding(1000, 64)
            self.gru = keras.layers.GRU(128)
            self.project = keras.layers.Dense(64)

        def call(self, sessions):
            return self.project(self.gru(self.item_embedding(sessions)))

        def train_step(self, data):
            sessions, targets = data
            with tf.GradientTape() as tape:
                state = self(sessions, training=True)
                logits = {product}
                labels = tf.range(tf.shape(targets)[0])
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32)))
                scaled = {scale}
            grads = {unscale}
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {{"loss": loss}}


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = SessionModel()
        model.compile(optimizer=keras.optimizers.Adam(2e-3))
"""
K2 = ("import os\n    os.environ['TF_USE_LEGACY_KERAS'] = '1'\n    import tensorflow as tf\n    from tensorflow import keras",
      "self.optimizer.get_scaled_loss(loss)",
      "self.optimizer.get_unscaled_gradients(tape.gradient(scaled, self.trainable_variables))")
K3 = ("import tensorflow as tf\n    import keras", "self.optimizer.scale_loss(loss)",
      "tape.gradient(scaled, self.trainable_variables)")


def session(generation, product="tf.matmul(state, self.item_embedding(targets), transpose_b=True)") -> str:
    imports, scale, unscale = generation
    return SESSION.format(imports=imports, scale=scale, unscale=unscale, product=product)


def test_an_output_multiplied_with_float16_embeddings_is_no_head_tf_keras():
    assert found(session(K2), keras="2", only="MP205") == []


def test_an_output_multiplied_with_float16_embeddings_is_no_head_keras3():
    assert found(session(K3), only="MP205") == []


def test_an_output_that_is_the_loss_input_is_still_a_head():
    # The same model whose logits are its own output: the loss sees the float16 Dense (cast or not, the head's
    # rounding is float16's); reported as before.
    code = session(K3, product="state")
    assert found(code, only="MP205") == [("MP205", 10)]


def test_an_output_meeting_float32_values_stays_a_head():
    # tf.matmul with a float32 table: the float16 output would not even run; float32 there is what it needs.
    code = session(K3, product="tf.matmul(state, tf.ones((1000, 64)), transpose_b=True)")
    assert found(code, only="MP205") == [("MP205", 10)]


# 2. tf.signal's FFT family has no float16 kernel.
LOGMEL = """
    {imports}


    class LogMelSpectrogram(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.mel_matrix = tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 7600.0)

        def call(self, waveform):
            spectrum = {op}
            mel = tf.tensordot(tf.square(tf.abs(spectrum)), self.mel_matrix, 1)
            return tf.math.log(mel + 1e-6)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        audio = keras.Input((16000,))
        h = {layer}(audio)
        model = keras.Model(audio, keras.layers.Dense(6, activation="softmax", dtype="float32")(keras.layers.Flatten()(h)))
        model.compile("adam", "sparse_categorical_crossentropy")
"""
STFT = "tf.signal.stft(waveform, 400, 160, 512)"


def logmel(generation, op=STFT, layer="LogMelSpectrogram()") -> str:
    return LOGMEL.format(imports=generation[0], op=op, layer=layer)


def test_stft_of_a_float16_waveform_has_no_kernel_tf_keras():
    findings = [f for f in lint(logmel(K2), keras="2", fix=False).findings if f.code == "MP208"]
    assert [f.line for f in findings] == [13] and findings[0].fix is None
    assert "tf.signal.stft" in findings[0].message


def test_rfft_and_dct_of_float16_have_no_kernel_keras3():
    for op in ("tf.signal.rfft(waveform)", "tf.signal.dct(waveform)", "keras.ops.stft(waveform, 400, 160, 512)",
               "keras.ops.rfft(waveform)"):
        assert found(logmel(K3, op=op), only="MP208") == [("MP208", 11)], op


def test_a_float32_front_end_layer_stays_silent():
    assert found(logmel(K2, layer='LogMelSpectrogram(dtype="float32")'), keras="2", only="MP208") == []
    assert found(logmel(K3, layer='LogMelSpectrogram(dtype="float32")'), only="MP208") == []


def test_framing_a_float16_waveform_is_fine():
    # tf.signal.frame and a float16 window have kernels (ran): no finding.
    op = "tf.signal.frame(waveform, 400, 160) * tf.signal.hann_window(400, dtype=waveform.dtype)"
    assert found(logmel(K3, op=op), only="MP208") == []


# 3. A segment sum of float16 messages: as long as a node's degree.
GNN = """
    import numpy as np
    import tensorflow as tf
    import keras
    from keras import ops


    class MeanAggregate(keras.layers.Layer):
        def __init__(self, units, src, dst, num_nodes, **kwargs):
            super().__init__(**kwargs)
            self.src, self.dst, self.num_nodes = src, dst, num_nodes
            self.in_degree = np.maximum(np.bincount(dst, minlength=num_nodes), 1).astype("float32")[:, None]
            self.neigh_proj = keras.layers.Dense(units, use_bias=False)

        def call(self, h):
            messages = {messages}
            summed = {op}(messages, self.dst, num_segments=self.num_nodes)
            return summed / ops.cast(self.in_degree, summed.dtype)


    def main(feats, labels, src, dst):
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((32,)), MeanAggregate(64, src, dst, len(labels)),
                                  keras.layers.Dense(5, dtype="float32")])
        model.compile("adam", "sparse_categorical_crossentropy")
"""
MESSAGES = "self.neigh_proj(ops.take(h, self.src, axis=0))"


def test_a_float16_segment_sum_is_reported_keras3():
    for op in ("ops.segment_sum", "tf.math.unsorted_segment_sum"):
        code = GNN.format(messages=MESSAGES, op=op)
        assert found(code, only="MP203") == [("MP203", 16)], op


def test_a_segment_sum_of_float32_messages_stays_silent():
    code = GNN.format(messages=f'ops.cast({MESSAGES}, "float32")', op="ops.segment_sum")
    assert found(code, only="MP203") == []


def test_a_segment_sum_of_sigmoid_gates_is_still_reported():
    # Each gate is at most 1, but a hub sums thousands of them: unlike a cumsum of one distribution (at most 1),
    # a segment sum of values in [0, 1] is bounded only by the degree.
    code = GNN.format(messages=f"ops.sigmoid({MESSAGES})", op="ops.segment_sum")
    assert found(code, only="MP203") == [("MP203", 16)]


# 4. log of a value narrowed to float16.
LOGQ = """
    {imports}


    class TwoTower(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.user_tower = keras.layers.Dense(64)
            self.track_tower = keras.layers.Dense(64)

        def call(self, inputs):
            users, tracks = inputs
            return tf.matmul(self.user_tower(users), self.track_tower(tracks), transpose_b=True)

        def train_step(self, data):
            users, tracks, track_prob = data
            with tf.GradientTape() as tape:
                logits = self((users, tracks), training=True)
                logits -= {log}[None, :]
                labels = tf.range(tf.shape(logits)[0])
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32)))
                scaled = {scale}
            grads = {unscale}
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {{"loss": loss}}


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = TwoTower()
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
"""


def logq(generation, log="tf.math.log(tf.cast(track_prob, logits.dtype))") -> str:
    imports, scale, unscale = generation
    return LOGQ.format(imports=imports, scale=scale, unscale=unscale, log=log)


def test_log_of_a_probability_cast_to_float16_is_reported_and_fixed_tf_keras():
    mp204 = [f for f in lint(logq(K2), keras="2", fix=False).findings if f.code == "MP204"]
    assert [f.line for f in mp204] == [21] and mp204[0].fix is not None
    fixed = lint(logq(K2), keras="2").fixed_text
    assert "logits -= tf.cast(tf.math.log(tf.cast(track_prob, tf.float32)), logits.dtype)[None, :]" in fixed
    compile(fixed, "train.py", "exec")


def test_log_of_a_probability_cast_to_float16_is_reported_keras3():
    assert found(logq(K3), only="MP204") == [("MP204", 19)]


def test_log_in_float32_then_cast_stays_silent():
    for log in ("tf.cast(tf.math.log(track_prob), logits.dtype)",
                "tf.cast(tf.math.log(tf.clip_by_value(track_prob, 1e-6, 1.0)), logits.dtype)"):
        assert found(logq(K2, log=log), keras="2", only="MP204") == [], log


def test_log_of_a_probability_cast_with_keras_ops_is_fixed_with_keras_ops():
    code = logq(K3, log="ops.log(ops.cast(track_prob, logits.dtype))").replace(
        "import keras", "import keras\n    from keras import ops")
    assert found(code, only="MP204") == [("MP204", 20)]
    fixed = lint(code).fixed_text
    assert 'logits -= ops.cast(ops.log(ops.cast(track_prob, "float32")), logits.dtype)[None, :]' in fixed


def test_log_of_a_count_cast_to_float16_stays_silent():
    # An integer narrowed to float16 is exact to 2048 and inf only past 65504 (a batch size, a class count): the
    # underflow this class is about needs a small positive float.
    for log in ("tf.math.log(tf.cast(tf.shape(logits)[0], logits.dtype))",
                "tf.math.log(tf.cast(tf.range(1, 11), logits.dtype))"):
        assert found(logq(K3, log=log), only="MP204") == [], log


def test_log_of_a_float16_value_cast_to_float16_again_stays_silent():
    # The cast does not narrow: logits are float16 already (the model's output), so this is the log of a float16
    # value (unknown range, like any float16 log): not this class.
    assert found(logq(K3, log="tf.math.log(tf.cast(tf.nn.relu(logits) + 1.0, logits.dtype))"), only="MP204") == []


# 5. (the lead's root of the wrong fix in 1) A model calling itself returns what its ``call`` returns: with a
#    dtype="float32" head, ``self(x)`` in train_step is float32, so fix validation sees the mix MP205's fix would make
#    (float32 output beside float16 embeddings in tf.matmul) and withholds it by itself, in shapes MP205 still reports.
def _self_call_dtype(code: str, keras: int):
    import libcst as cst

    from mpfix.codemods.facts.dtype_facts import facts_for

    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module, keras=keras)
    calls = [n for n in facts.nodes(cst.Call) if isinstance(n.func, cst.Name) and n.func.value == "self"]
    assert len(calls) == 1
    return facts.dtype_of(calls[0])


def test_a_model_calling_itself_returns_its_float32_head():
    from mpfix.codemods.analysis.dtypes import Dtype

    for generation, keras in ((K2, 2), (K3, 3)):
        code = session(generation)
        assert _self_call_dtype(code, keras) is Dtype.FLOAT16
        fixed = code.replace("keras.layers.Dense(64)", 'keras.layers.Dense(64, dtype="float32")')
        assert _self_call_dtype(fixed, keras) is Dtype.FLOAT32


def test_fix_validation_withholds_a_head_fix_that_makes_a_mix():
    # The output scaled first, then multiplied with float16 embeddings: MP205 reports the Dense (its own check sees
    # only the output's direct uses), and its fix would make tf.matmul mix float32 and float16.
    for generation, keras in ((K2, "2"), (K3, "3")):
        code = session(generation, product="tf.matmul(state * 2.0, self.item_embedding(targets), transpose_b=True)")
        findings = [f for f in lint(code, keras=keras, fix=False).findings if f.code == "MP205"]
        assert [f.line for f in findings] == [10 if keras == "3" else 12], keras
        result = lint(code, keras=keras)
        assert 'dtype="float32"' not in (result.fixed_text or ""), keras


# 6. The same wrong fix for a model this file builds and trains in a custom loop (found after wave 13, ran: TypeError
#    "Input 'b' of 'MatMul' Op has type float16 that does not match type float32" after MP205's fix): a call of a
#    Keras model or layer bound once to its construction here is float32 by construction when its layers make it so,
#    so fix validation sees the mix and withholds the fix (the finding stays, reported without one).
LOOP = """
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")
    user_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(16)])
    item_emb = keras.layers.Embedding(100, 16)
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())


    @tf.function
    def step(x, items):
        with tf.GradientTape() as tape:
            u = user_model(x, training=True)
            logits = {logits}
            labels = tf.range(tf.shape(logits)[0])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32)))
            scaled = {scale}
        grads = {unscale}
        optimizer.apply_gradients(zip(grads, user_model.trainable_variables))
        return loss
"""


def loop(generation, logits="tf.matmul(u, item_emb(items), transpose_b=True)") -> str:
    imports, scale, unscale = generation
    return LOOP.format(imports=imports, logits=logits, scale=scale.replace("self.", ""),
                       unscale=unscale.replace("self.", "").replace("trainable_variables", "user_model.trainable_variables"))


def test_a_head_fix_that_would_mix_with_float16_embeddings_is_withheld():
    for generation, keras in ((K2, "2"), (K3, "3")):
        code = loop(generation)
        assert [f.code for f in lint(code, keras=keras, fix=False).findings if f.code == "MP205"] == ["MP205"], keras
        assert 'dtype="float32"' not in (lint(code, keras=keras).fixed_text or ""), keras


def test_a_head_fix_with_no_float16_partner_is_still_written():
    for generation, keras in ((K2, "2"), (K3, "3")):
        fixed = lint(loop(generation, logits="u"), keras=keras).fixed_text or ""
        assert 'keras.layers.Dense(16, dtype="float32")' in fixed, keras


def test_the_receiver_is_decided_by_binding_not_by_name():
    # (the lead's review of 9b406a2) `this(x)` in a train_step whose first parameter is `this` is the model calling
    # itself; a module function's parameter named `self` is a parameter (a callable passed in), never the model.
    from mpfix.codemods.analysis.dtypes import Dtype

    fixed = session(K3).replace("keras.layers.Dense(64)", 'keras.layers.Dense(64, dtype="float32")')
    renamed = fixed.replace("def train_step(self, data):", "def train_step(this, data):").replace(
        "state = self(sessions", "state = this(sessions")
    assert _self_call_dtype(fixed, 3) is Dtype.FLOAT32 and "state = this(sessions" in renamed
    import libcst as cst

    from mpfix.codemods.facts.dtype_facts import facts_for

    module = cst.parse_module(textwrap.dedent(renamed).lstrip("\n"))
    facts = facts_for(module, keras=3)
    this = [n for n in facts.nodes(cst.Call) if isinstance(n.func, cst.Name) and n.func.value == "this"]
    assert len(this) == 1 and facts.dtype_of(this[0]) is Dtype.FLOAT32
    outside = fixed + '''

    @tf.function
    def run(self, x):
        return self(x)
'''
    module = cst.parse_module(textwrap.dedent(outside).lstrip("\n"))
    facts = facts_for(module, keras=3)
    calls = [n for n in facts.nodes(cst.Call) if isinstance(n.func, cst.Name) and n.func.value == "self"
             and module.code_for_node(n) == "self(x)"]
    assert len(calls) == 1 and facts.dtype_of(calls[0]) is not Dtype.FLOAT32
