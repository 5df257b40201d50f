"""The gradient-path model (mpfix.codemods.analysis.gradient_path) on its own: values, states, events, tags."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from mpfix.codemods.analysis.gradient_path import (
    ACCUMULATE,
    DIVIDED,
    ALL_REDUCE,
    CLIP_GLOBAL_NORM,
    MANUAL,
    MANUAL_UNSCALE,
    NOISE,
    SCALED,
    UNSCALE,
    UNSCALED,
    exclusive,
    training_steps,
)
from mpfix.codemods.base import RuleContext
from mpfix.codemods.names import ImportTable
from mpfix.policy import policy_in_text


def analyse(code: str, keras: int = 3):
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    text = module.code
    context = RuleContext(module=module, path=Path("x.py"), keras=keras, policy=policy_in_text(text),
                          module_policy=policy_in_text(text), imports=ImportTable(module))
    return module, training_steps(context)


def events(flow) -> list[tuple[str, list[str]]]:
    return [(e.kind, sorted(e.states)) for e in flow.path.events]


def test_keras2_clip_before_unscale_then_helper_after():
    module, analysis = analyse("""
        import tensorflow as tf
        import tf_keras
        opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))

        def clip(gradients):
            return [tf.clip_by_norm(g, 1.0) for g in gradients]

        def step(x, y):
            with tf.GradientTape() as tape:
                scaled = opt.get_scaled_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled, model.trainable_variables)
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
            grads = opt.get_unscaled_gradients(grads)
            grads = clip(grads)
            opt.apply_gradients(zip(grads, model.trainable_variables))
    """, keras=2)
    (flow,) = analysis.flows
    assert flow.kind == "lso"
    assert events(flow) == [(CLIP_GLOBAL_NORM, [SCALED]), (UNSCALE, [SCALED]), ("helper", [UNSCALED])]
    assert flow.path.events[-1].helper == "clip"
    assert flow.path.states == {UNSCALED}
    assert [e.kind for e in flow.path.sensitive_on(SCALED)] == [CLIP_GLOBAL_NORM]


def test_noise_and_manual_unscale_in_comprehensions():
    _, analysis = analyse("""
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        with tf.GradientTape() as tape:
            scaled = opt.scale_loss(loss_fn(y, model(x)))
        grads = tape.gradient(scaled, model.trainable_variables)
        grads = [g + tf.random.normal(tf.shape(g), stddev=0.1) for g in grads]
        grads = [g / opt.dynamic_scale for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))
    """)
    (flow,) = analysis.flows
    assert events(flow) == [(NOISE, [SCALED]), (MANUAL_UNSCALE, [SCALED])]
    assert flow.path.events[1].optimizer == "opt"
    assert flow.path.states == {MANUAL}


def test_accumulation_into_variables_links_the_update_and_keeps_the_state():
    _, analysis = analyse("""
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        for x, y in micro_batches:
            with tf.GradientTape() as tape:
                scaled = opt.scale_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled, model.trainable_variables)
            for i, g in enumerate(grads):
                self.accumulated[i].assign_add(g)
        opt.apply_gradients(zip(self.accumulated, model.trainable_variables))
    """)
    (flow,) = analysis.flows
    assert events(flow) == [(ACCUMULATE, [SCALED])]
    assert flow.path.states == {SCALED}
    assert flow.path.sensitive_on(SCALED) == []  # linear: not a bug by itself


def test_all_reduce_list_accumulation_and_split_into_two_optimizers():
    _, analysis = analyse("""
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        head = tf.keras.optimizers.SGD(0.01)

        def step(x, y):
            with tf.GradientTape() as tape:
                scaled = opt.scale_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled, variables)
            grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
            parts = []
            parts.append(grads[:n])
            opt.apply_gradients(zip(parts[0], variables[:n]))
            head.apply_gradients(zip(grads[n:], variables[n:]))
    """)
    by_optimizer = {f.optimizer: f for f in analysis.flows}
    assert set(by_optimizer) == {"opt", "head"}
    assert by_optimizer["opt"].kind == "lso" and by_optimizer["head"].kind == "plain"
    assert [e.kind for e in by_optimizer["opt"].path.events] == [ALL_REDUCE, ACCUMULATE]
    assert [e.kind for e in by_optimizer["head"].path.events] == [ALL_REDUCE]
    assert all(f.path.states == {SCALED} for f in analysis.flows)


def test_rebinding_replaces_the_state_but_a_branch_only_adds_to_it():
    _, analysis = analyse("""
        import tensorflow as tf
        import tf_keras
        opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
        with tf.GradientTape() as tape:
            scaled = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled, params)
        if unscale:
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, params))
    """, keras=2)
    (flow,) = analysis.flows
    assert flow.path.states == {SCALED, UNSCALED}


@pytest.mark.parametrize("keras", [2, 3])
def test_optimizer_tags(keras: int):
    _, analysis = analyse("""
        import tensorflow as tf
        from somewhere import make_optimizer
        plain = tf.keras.optimizers.SGD(0.1)
        factor = tf.keras.optimizers.SGD(0.1, loss_scale_factor=128.0)
        unknown = make_optimizer()

        class Net(tf.keras.Model):
            def train_step(self, data):
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(data)
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))

        def step():
            with tf.GradientTape() as tape:
                loss = f()
            g = tape.gradient(loss, params)
            plain.apply_gradients(zip(g, params))
            factor.apply_gradients(zip(g, params))
            unknown.apply_gradients(zip(g, params))
    """, keras=keras)
    kinds = {f.optimizer: f.kind for f in analysis.flows}
    assert kinds == {"self.optimizer": "lso", "plain": "plain", "factor": "lso", "unknown": "unknown"}


def test_tf1_compute_gradients_and_minimize():
    _, analysis = analyse("""
        import tensorflow as tf
        opt = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
        grads_and_vars = opt.compute_gradients(loss)
        grads_and_vars = [(tf.clip_by_value(g, -1.0, 1.0), v) for g, v in grads_and_vars]
        opt.apply_gradients(grads_and_vars)
        other = tf.compat.v1.train.AdamOptimizer()
        train_op = other.minimize(loss)
    """)
    (flow,) = analysis.flows
    assert flow.gradient.kind == "compute_gradients" and flow.gradient.optimizer == "opt"
    assert flow.build.is_v1 and not flow.build.is_v1_lso
    assert [e.kind for e in flow.path.events] == ["clip_by_value"]
    ((_, minimize, build),) = analysis.minimizes
    assert minimize.optimizer == "other" and build.is_v1


def test_strategy_run_step_with_compute_average_loss_and_a_term_after_scaling():
    _, analysis = analyse("""
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))

        @tf.function
        def distributed_step(batch):
            def step_fn(x, y):
                with tf.GradientTape() as tape:
                    per_example = loss_fn(y, model(x))
                    loss = tf.nn.compute_average_loss(per_example, global_batch_size=64)
                    scaled = opt.scale_loss(loss)
                    scaled += tf.add_n(model.losses)
                grads = tape.gradient(scaled, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(step_fn, args=batch)
    """)
    (flow,) = analysis.flows
    assert flow.scope.name == "step_fn" and flow.scale is not None and flow.path.states == {SCALED}
    assert flow.build is not None and flow.build.is_lso


def test_branches_are_exclusive_only_across_an_if():
    _, analysis = analyse("""
        if use_strategy:
            a = 1
            if deeper:
                b = 2
        else:
            c = 3
        try:
            d = 4
        except ValueError:
            e = 5
        f = 6
    """)
    statements = {next(iter(st.node.body)).targets[0].target.value: st
                  for st in analysis.scopes[0].statements if isinstance(st.node, cst.SimpleStatementLine)}
    assert exclusive(statements["a"], statements["c"]) and exclusive(statements["b"], statements["c"])
    assert not exclusive(statements["a"], statements["b"])
    assert exclusive(statements["d"], statements["e"])
    assert not exclusive(statements["f"], statements["a"]) and not exclusive(statements["c"], statements["f"])


def test_gradient_used_only_for_logging_does_not_reach_the_update_path():
    _, analysis = analyse("""
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        with tf.GradientTape() as tape:
            scaled = opt.scale_loss(loss)
        grads = tape.gradient(scaled, params)
        norm = tf.linalg.global_norm([tf.clip_by_norm(g, 1.0) for g in grads])
        opt.apply_gradients(zip(grads, params))
    """)
    (flow,) = analysis.flows
    assert flow.path.events == []


def test_an_optimizers_own_methods_are_not_training_loops():
    # tf_keras optimizer.py `minimize` and optimizer_v1.py's TFOptimizer forward to apply_gradients.
    _, analysis = analyse("""
        import tensorflow as tf

        class Optimizer:
            def minimize(self, loss, var_list, tape=None):
                grads_and_vars = self.compute_gradients(loss, var_list, tape)
                self.apply_gradients(grads_and_vars)

        class TFOptimizer(Optimizer):
            def get_updates(self, loss, params):
                grads = self.optimizer.compute_gradients(loss, params)
                return self.optimizer.apply_gradients(grads)

        def train(opt):
            grads_and_vars = opt.compute_gradients(loss)
            opt.apply_gradients(grads_and_vars)
    """)
    assert [f.scope.name for f in analysis.flows] == ["train"]


def test_accumulator_object_then_clip_in_the_same_function():
    # DLE ELECTRA run_pretraining.py: `accumulator(gradients)` ... `accumulator.gradients` ... clip ... apply.
    _, analysis = analyse("""
        import tensorflow as tf
        import tf_keras
        def train_one_step(model, optimizer, features, accumulator, take_step):
            with tf.GradientTape() as tape:
                total_loss = optimizer.get_scaled_loss(model(features))
            gradients = tape.gradient(total_loss, model.trainable_variables)
            gradients = optimizer.get_unscaled_gradients(gradients)
            accumulator(gradients)
            if take_step:
                averaged = [g / 4 for g in accumulator.gradients]
                (clipped, _) = tf.clip_by_global_norm(averaged, clip_norm=1.0)
                optimizer.apply_gradients(zip(clipped, model.trainable_variables))
    """, keras=2)
    (flow,) = analysis.flows
    assert [e.kind for e in flow.path.events] == [UNSCALE, ACCUMULATE, CLIP_GLOBAL_NORM]
    assert flow.path.states == {UNSCALED}


def test_accumulation_in_one_function_and_update_in_another():
    # DLE BERT model_training_utils.py: forward() adds to `accum_gradients`, step() clips and applies.
    _, analysis = analyse("""
        import tensorflow as tf
        def run(model, optimizer, loss_fn):
            accum_gradients = GradientAccumulator()

            def forward(inputs, labels):
                with tf.GradientTape() as tape:
                    scaled_loss = optimizer.get_scaled_loss(loss_fn(labels, model(inputs)))
                grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                accum_gradients.add_gradients(grads)

            def step(n):
                gradients = [g / n for g in accum_gradients.gradients]
                (gradients, _) = tf.clip_by_global_norm(gradients, clip_norm=1.0)
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    """, keras=2)
    assert analysis.flows == []
    (flow,) = analysis.cross_flows
    assert flow.scope.name == "step" and flow.scale is not None
    assert [e.kind for e in flow.path.events] == [UNSCALE, ACCUMULATE, CLIP_GLOBAL_NORM]


def test_callbacks_and_all_reduce_in_helpers_with_a_tape_passed_in():
    # tf-models modeling/grad_utils.py: the caller's callbacks run on the scaled gradients.
    _, analysis = analyse("""
        import tensorflow as tf
        import tf_keras

        def _run_callbacks(callbacks, grads_and_vars):
            for callback in callbacks:
                grads_and_vars = callback(grads_and_vars)
            return grads_and_vars

        def _allreduce(grads_and_vars):
            grads, variables = zip(*grads_and_vars)
            return tf.distribute.get_replica_context().all_reduce("sum", grads), variables

        def minimize(tape, optimizer, loss, trainable_variables, callbacks):
            if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
                with tape:
                    scaled_loss = optimizer.get_scaled_loss(loss)
                grads_and_vars = zip(tape.gradient(scaled_loss, trainable_variables), trainable_variables)
                grads_and_vars = _run_callbacks(callbacks, grads_and_vars)
                reduced, variables = _allreduce(grads_and_vars)
                grads_and_vars = zip(optimizer.get_unscaled_gradients(reduced), variables)
            else:
                grads_and_vars = zip(tape.gradient(loss, trainable_variables), trainable_variables)
            optimizer.apply_gradients(grads_and_vars)
    """, keras=2)
    scaled, plain = sorted(analysis.flows, key=lambda f: f.scale is None)
    assert [(e.kind, e.helper) for e in scaled.path.events] == [
        ("callback", "_run_callbacks"), (ALL_REDUCE, "_allreduce"), (UNSCALE, None)]
    assert scaled.path.states == {UNSCALED} and plain.path.states == {UNSCALED}  # branches stay apart
    assert plain.path.events == []


@pytest.mark.parametrize("keras", [2, 3])
def test_what_the_update_applies_depends_on_the_generation(keras: int):
    scale = "scale_loss" if keras == 3 else "get_scaled_loss"
    _, analysis = analyse(f"""
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        with tf.GradientTape() as tape:
            loss = f()
            scaled = opt.{scale}(loss)
        grads = tape.gradient(scaled, params)
        plain = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        opt.apply_gradients(zip([g / opt.dynamic_scale for g in grads], params))
        opt.apply_gradients(zip(plain, params))
        opt.apply_gradients(zip(opt.get_unscaled_gradients([g / opt.loss_scale for g in grads]), params))
    """, keras=keras)
    assert len(analysis.flows) == 4  # every update is linked
    by_line = {}
    for f in analysis.flows:
        by_line.setdefault(f.apply.statement.node, []).append(sorted(analysis.applied(f)))
    rows = [v for _, v in sorted(by_line.items(), key=lambda kv: analysis.scopes[0].statements.index(
        next(st for st in analysis.scopes[0].statements if st.node is kv[0])))]
    if keras == 3:  # the LSO divides inside apply
        assert rows == [[[UNSCALED]], [[DIVIDED]], [[DIVIDED]], [[DIVIDED]]]
    else:  # Keras 2 applies what it gets
        assert rows == [[[SCALED]], [[UNSCALED]], [[UNSCALED]], [[DIVIDED]]]


def test_gradients_passed_to_a_method_that_splits_them_between_two_optimizers():
    # DLE DLRM nn/trainer.py: train_step passes the scaled gradients to _weight_update, which unscales
    # with the MLP optimizer's scale and applies part of them with a second (embedding) optimizer.
    _, analysis = analyse("""
        import tensorflow as tf

        class Trainer:
            def _weight_update(self, gradients):
                if self.amp:
                    gradients = self.mlp_optimizer.get_unscaled_gradients(gradients)
                dense, embedding = [], []
                for var, grad in zip(self.model.trainable_variables, gradients):
                    if "embedding" in var.name:
                        embedding.append(grad)
                    else:
                        dense.append(grad)
                self.mlp_optimizer.apply_gradients(zip(dense, self.dense_variables))
                self.embedding_optimizer.apply_gradients(zip(embedding, self.embedding_variables))

            def train_step(self, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = self.mlp_optimizer.get_scaled_loss(self.loss(y, self.model(x)))
                gradients = tape.gradient(scaled_loss, self.model.trainable_variables)
                self._weight_update(gradients)
    """, keras=2)
    assert analysis.flows == []
    updates = {f.optimizer: f for f in analysis.cross_flows}
    assert set(updates) == {"self.mlp_optimizer", "self.embedding_optimizer"}
    for flow in updates.values():
        assert flow.scale is not None and flow.scope.name == "_weight_update"
        assert [e.kind for e in flow.path.events] == [UNSCALE, ACCUMULATE]
        assert flow.path.states == {SCALED, UNSCALED}  # `if self.amp:` may skip the unscale


def test_states_and_kinds_are_enums_and_the_model_needs_no_rule_context():
    """The model reads a file through ``FileView`` (module, resolve, code, keras, cache), not the rule
    framework; states, event kinds and optimizer kinds are enums."""
    from dataclasses import dataclass, field

    from mpfix.codemods.analysis.gradient_path import EventKind, OptimizerKind, State

    @dataclass
    class View:
        module: cst.Module
        keras: int = 3
        cache: dict = field(default_factory=dict)

        def __post_init__(self):
            self.imports = ImportTable(self.module)

        def resolve(self, node):
            return self.imports.resolve(node)

        def code(self, node):
            return self.module.code_for_node(node)

    module = cst.parse_module(textwrap.dedent("""
        import keras
        import tensorflow as tf
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        def step(x, y):
            with tf.GradientTape() as tape:
                scaled = opt.scale_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled, model.trainable_variables)
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
            opt.apply_gradients(zip(grads, model.trainable_variables))
    """).lstrip("\n"))
    (flow,) = training_steps(View(module)).flows
    assert flow.kind is OptimizerKind.LSO
    assert flow.path.states == frozenset({State.SCALED})
    assert [e.kind for e in flow.path.events] == [EventKind.CLIP_GLOBAL_NORM]
    assert all(isinstance(e.kind, EventKind) for e in flow.path.events)
