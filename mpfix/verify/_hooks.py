"""Child side: hooks on TensorFlow and Keras that measure every optimizer step.

What is hooked and why:

* ``tf.GradientTape.gradient``: the target is the loss (Keras 3 ``fit`` and custom loops
  both take the gradient of the loss). When the target is a tensor returned by
  ``scale_loss`` (Keras 3) or ``get_scaled_loss`` (Keras 2) the unscaled loss that went in
  is recorded instead.
* optimizer ``apply_gradients``/``apply`` (Keras 3 base optimizer and
  ``LossScaleOptimizer``; Keras 2 optimizers, legacy optimizers and both Keras 2 loss
  scale optimizers): one call of the outermost optimizer is one step. The gradients are
  summarised in-graph (non-finite count, exact-zero count, sum of squares) and written
  with the pending loss and the current loss scale as one row of the channel.
* ``tf.function`` calls (``Function.__call__``) and Keras ``fit``/``train_on_batch``:
  after an outermost call returns to eager code, new rows are read, and the run is
  stopped when enough steps were seen or a non-finite loss appeared.

The inner optimizer of a loss scale optimizer is not measured while its caller is (that
call is the step), so a step is counted once whatever the nesting; a script that calls
``inner_optimizer`` itself makes its steps through it.

The ``Recorder`` that measures lives in ``_recorder`` (its in-graph ops in
``_measure_ops``); this module only patches TensorFlow and hands calls to it.
"""

from __future__ import annotations

import functools

import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import polymorphic_function

from mpfix.verify._measure_ops import _flat_tensors, _replica_id

# Re-exported: _bootstrap builds ``_hooks.Recorder`` and catches ``_hooks.StopVerify``.
from mpfix.verify._recorder import Recorder, StopVerify

__all__ = ["Recorder", "StopVerify", "install_core"]


def _wrap(owner, name, make):
    original = owner.__dict__.get(name)
    if original is None or getattr(original, "__mpfix_original__", None) is not None:
        return
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    wrapper.__mpfix_original__ = original
    setattr(owner, name, wrapper)


class _NumericsPause:
    """Under ``--locate``: no check_numerics while a dynamic loss scaler runs, because
    its overflows are expected (the step is skipped and the scale halved)."""

    def __init__(self, active: bool) -> None:
        self.active = active

    def __enter__(self):
        if self.active:
            tf.debugging.disable_check_numerics()

    def __exit__(self, *exc):
        if self.active:
            tf.debugging.enable_check_numerics()
        return False


def install_core(rec: Recorder) -> None:
    """Hooks that do not depend on the Keras generation."""

    def make_gradient(original):
        def gradient(self, target, *args, **kwargs):
            loss = None
            if rec._depth() == 0:
                if rec.evidence is not None and _replica_id() == 0:
                    rec.guarded("evidence", rec.evidence.on_gradient)
                loss = rec.guarded("gradient", rec.on_gradient, target)
            dynamic = rec.locate and any(rec.is_dynamic_scaled(t) for t in _flat_tensors(target))
            with _NumericsPause(dynamic):
                result = original(self, target, *args, **kwargs)
            if loss is not None:
                rec.guarded("gradient-map", rec.note_gradients, result, loss)
            return result

        return gradient

    _wrap(tf.GradientTape, "gradient", make_gradient)

    def make_call(original):
        def __call__(self, *args, **kwargs):
            eager = tf.executing_eagerly()
            result = original(self, *args, **kwargs)
            if eager and rec._depth() == 0:
                rec.flush()
            return result

        return __call__

    _wrap(polymorphic_function.Function, "__call__", make_call)


def _make_apply(rec: Recorder, grads_of, generation: int):
    """Wrapper factory for apply_gradients/apply; ``grads_of(args, kwargs)`` returns
    (grads, new_args, new_kwargs) with iterators materialised."""

    def make(original):
        def method(self, *args, **kwargs):
            if not rec.is_step(self):
                rec._enter()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    rec._leave()
            grads, args, kwargs = grads_of(args, kwargs)
            rec.generations.add(generation)
            _, dynamic, _ = rec._scale_info(self)
            rec._enter()
            rec.begin_outer()
            try:
                with _NumericsPause(rec.locate and dynamic):
                    # Measured before the update: the scale read is the one this step's
                    # loss was multiplied by (an unbuilt Keras 3 scaler reports its initial
                    # scale, as its own scale_loss does; tf.function retraces once the
                    # optimizer has built its variables).
                    rec.guarded("apply", rec.on_apply, self, grads)
                    result = original(self, *args, **kwargs)
            finally:
                rec.end_outer()
                rec._leave()
            if tf.executing_eagerly():
                rec.flush()
            return result

        return method

    return make


def _grads_from_pairs(args, kwargs):
    if args:
        pairs = list(args[0])
        args = (pairs,) + tuple(args[1:])
    else:
        pairs = list(kwargs["grads_and_vars"])
        kwargs = dict(kwargs, grads_and_vars=pairs)
    return [g for g, _ in pairs], args, kwargs


def _grads_from_list(args, kwargs):
    if args:
        grads = list(args[0])
        args = (grads,) + tuple(args[1:])
    else:
        grads = list(kwargs["grads"])
        kwargs = dict(kwargs, grads=grads)
    return grads, args, kwargs


def _make_entry(rec: Recorder, entry: str):
    def make(original):
        def method(self, *args, **kwargs):
            rec.entries.add(entry)
            try:
                return original(self, *args, **kwargs)
            finally:
                if tf.executing_eagerly() and rec._depth() == 0:
                    rec.flush(may_stop=False)
            # The stop check happens on the next call or boundary.

        return method

    return make
