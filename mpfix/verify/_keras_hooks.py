"""Child side: the Keras 3 (``keras``) and Keras 2 (``tf_keras``) parts of the hooks,
and the dtype-policy forcing used by the float32 baseline and by ``--policy``.

How the float32 baseline is forced (documented in docs/verify.md):

* every dtype policy constructed from ``"mixed_float16"``/``"mixed_bfloat16"`` becomes
  ``"float32"`` (the global policy set by the script, policies passed to layers as
  ``dtype=...``, ``Policy(...)`` objects): the constructor is patched, so it does not matter
  how the script reaches it;
* a loss scale optimizer the script builds becomes a pass-through: Keras 2
  ``dynamic=False, initial_scale=1`` (exactly the inner optimizer); Keras 3 has no fixed
  form, so its scale starts at 1 and never grows (it still skips a step whose gradients
  are non-finite, which float32 training rarely produces); a Keras 3 fixed loss scale
  (``loss_scale_factor=N`` on any optimizer) is dropped, so ``scale_loss`` returns the loss
  and ``apply`` divides by nothing: the baseline is float32 training with no loss scaling at
  all, and a script whose own scaling is half done (the factor without ``scale_loss``: every
  update 1/N) stalls beside it instead of agreeing with it.

``--policy X`` for the mixed run sets the global policy to X before the script runs and
turns every later ``set_global_policy``/``set_dtype_policy`` call into a request for X
(per-layer ``dtype=`` arguments are left alone: ``dtype="float32"`` on an output layer is
the fix, not the bug).
"""

from __future__ import annotations

import inspect
import os
import sys

from mpfix.verify import _metric_hooks
from mpfix.verify._hooks import (
    Recorder,
    _grads_from_list,
    _grads_from_pairs,
    _make_apply,
    _make_entry,
    _wrap,
)

MIXED = ("mixed_float16", "mixed_bfloat16")
# What the float32 baseline turns into "float32": the mixed policies and the pure
# half-precision ones (a "float16" policy left alone would make the baseline float16 too).
TO_FLOAT32 = MIXED + ("float16", "bfloat16")
# Keras 3 compares the growth counter with this value minus one; any value far beyond the
# run's length means "never grow".
NEVER_GROW = 2**30


def _force_setter(original, policy):
    def setter(*args, **kwargs):
        return original(policy)

    setter.__mpfix_original__ = original
    setter.__name__ = getattr(original, "__name__", "set_global_policy")
    return setter


def _replace_function_everywhere(original, replacement, prefixes) -> None:
    """Rebind every module attribute that is ``original`` (the public API re-exports the
    same function object from several modules)."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        for attr in ("set_global_policy", "set_dtype_policy"):
            if getattr(module, attr, None) is original:
                try:
                    setattr(module, attr, replacement)
                except (AttributeError, TypeError):
                    pass


def _policy_init(original):
    def __init__(self, name=None, *args, **kwargs):
        if isinstance(name, str) and name in TO_FLOAT32:
            name = "float32"
        return original(self, name, *args, **kwargs)

    return __init__


def install_keras3(rec: Recorder, mode: str, policy: str) -> None:
    import keras
    from keras.src.dtype_policies import dtype_policy
    from keras.src.optimizers import base_optimizer, loss_scale_optimizer

    base = base_optimizer.BaseOptimizer
    lso = loss_scale_optimizer.LossScaleOptimizer

    def scale_info(opt):
        if isinstance(opt, lso):
            scale = opt.dynamic_scale if opt.built else opt.initial_scale
            return scale, True, True
        if isinstance(opt, base):
            factor = getattr(opt, "loss_scale_factor", None)
            return (factor or 1.0), False, factor is not None
        return None

    rec.scale_resolvers.append(scale_info)

    for cls in (base, lso):
        _wrap(cls, "apply_gradients", _make_apply(rec, _grads_from_pairs, 3))
        _wrap(cls, "apply", _make_apply(rec, _grads_from_list, 3))

        def make_scale(original, dynamic=cls is lso):
            def scale_loss(self, loss):
                scaled = original(self, loss)
                if scaled is not loss:
                    rec.note_scaled(scaled, loss, dynamic)
                return scaled

            return scale_loss

        _wrap(cls, "scale_loss", make_scale)

    def make_lso_init(original):
        def __init__(self, inner_optimizer, *args, **kwargs):
            if mode == "float32":
                args = ()
                kwargs = dict(kwargs, initial_scale=1.0, dynamic_growth_steps=NEVER_GROW)
            original(self, inner_optimizer, *args, **kwargs)
            rec.note_inner(inner_optimizer)

        return __init__

    _wrap(lso, "__init__", make_lso_init)

    def make_base_init(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            # A fixed loss scale is a pass-through too: scale_loss returns the loss, apply divides by nothing.
            self.loss_scale_factor = None

        return __init__

    if mode == "float32":
        _wrap(base, "__init__", make_base_init)

    _wrap_model(rec, keras.Model)
    _metric_hooks.install(rec, keras.Model, keras.callbacks.Callback, keras.metrics.Metric)
    from keras.src.layers import layer as layer_module
    from keras.src.losses import loss as loss_module

    _wrap_layers(rec, layer_module.Layer, keras.Model)
    _wrap_loss_inputs(rec, loss_module.Loss)

    if mode == "float32":
        _wrap(dtype_policy.DTypePolicy, "__init__", _policy_init)
    elif policy != "script":
        original = dtype_policy.set_dtype_policy
        _replace_function_everywhere(
            original, _force_setter(original, policy), ("keras", "tensorflow")
        )
        original(policy)


def install_keras2(rec: Recorder, mode: str, policy: str) -> None:
    import tf_keras
    from tf_keras.src.mixed_precision import loss_scale_optimizer as lso_module
    from tf_keras.src.mixed_precision import policy as policy_module
    from tf_keras.src.optimizers import optimizer as optimizer_module
    from tf_keras.src.optimizers.legacy import optimizer_v2

    base_lso = lso_module.BaseLossScaleOptimizer
    scalers = (lso_module.LossScaleOptimizer, lso_module.LossScaleOptimizerV3)

    def scale_info(opt):
        if isinstance(opt, base_lso):
            return opt.loss_scale, bool(opt.dynamic), False
        if isinstance(opt, (optimizer_module._BaseOptimizer, optimizer_v2.OptimizerV2)):
            return 1.0, False, False
        return None

    rec.scale_resolvers.append(scale_info)

    for cls in (optimizer_module._BaseOptimizer, optimizer_module.Optimizer, optimizer_v2.OptimizerV2, *scalers):
        _wrap(cls, "apply_gradients", _make_apply(rec, _grads_from_pairs, 2))

    def make_scaled(original):
        def get_scaled_loss(self, loss):
            if not callable(loss):
                scaled = original(self, loss)
                rec.note_scaled(scaled, loss, bool(self.dynamic))
                return scaled
            # minimize(lambda: loss, ...) on a loss scale optimizer: the callable is
            # scaled, and only calling it gives the tensors; remember the unscaled value
            # when the scaled one is computed, so the tape records the loss, not loss*scale.
            seen = []

            def unscaled():
                value = loss()
                seen.append(value)
                return value

            scaled_fn = original(self, unscaled)

            def scaled():
                value = scaled_fn()
                if seen:
                    rec.note_scaled(value, seen[-1], bool(self.dynamic))
                return value

            return scaled

        return get_scaled_loss

    def make_unscaled(original):
        def get_unscaled_gradients(self, grads):
            out = original(self, grads)
            rec.guarded("unscaled-gradients", rec.carry_gradients, list(grads), list(out))
            return out

        return get_unscaled_gradients

    def make_lso_init(original):
        def __init__(self, inner_optimizer, *args, **kwargs):
            if mode == "float32":
                args, kwargs = (), {"dynamic": False, "initial_scale": 1.0}
            original(self, inner_optimizer, *args, **kwargs)
            rec.note_inner(inner_optimizer)

        return __init__

    for cls in (base_lso, *scalers):
        _wrap(cls, "get_scaled_loss", make_scaled)
        _wrap(cls, "get_unscaled_gradients", make_unscaled)
    for cls in scalers:
        _wrap(cls, "__init__", make_lso_init)

    _wrap_model(rec, tf_keras.Model)
    _metric_hooks.install(rec, tf_keras.Model, tf_keras.callbacks.Callback, tf_keras.metrics.Metric)
    from tf_keras.src.engine import base_layer
    from tf_keras.src.losses import Loss

    _wrap_layers(rec, base_layer.Layer, tf_keras.Model)
    _wrap_loss_inputs(rec, Loss)

    if mode == "float32":
        _wrap(policy_module.Policy, "__init__", _policy_init)
    elif policy != "script":
        original = policy_module.set_global_policy
        _replace_function_everywhere(original, _force_setter(original, policy), ("tf_keras", "tensorflow"))
        original(policy)


def _wrap_layers(rec: Recorder, layer_cls, model_cls) -> None:
    """Headroom: the largest |value| of every float16 layer output, in-graph, and where the
    user's code built each layer. Layers computing in float32 or bfloat16 get nothing.
    ``MPFIX_VERIFY_HEADROOM=0`` leaves layers alone (benchmarks/verify_overhead.py times
    verify both ways)."""
    if os.environ.get("MPFIX_VERIFY_HEADROOM", "1") == "0":
        return

    def make_init(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            try:
                rec.note_layer_origin(self)
            except Exception:
                pass

        # Keras reads the constructor's argument spec (inspect.getfullargspec, which does
        # not follow __wrapped__) to build a layer's config: show it the original's.
        try:
            __init__.__signature__ = inspect.signature(original)
        except (TypeError, ValueError):
            pass
        return __init__

    def make_call(original):
        def __call__(self, *args, **kwargs):
            evidence = rec.evidence if rec._depth() == 0 else None
            begun = rec.guarded("layer-call", evidence.layer_call_begin) if evidence is not None else None
            outputs = original(self, *args, **kwargs)
            if begun is not None:
                rec.guarded("layer-call", evidence.layer_call_end, begun, self)
            if rec._depth() == 0 and getattr(self, "compute_dtype", None) == "float16":
                rec.guarded("layer", rec.on_layer_output, self, outputs)
                if isinstance(self, model_cls):
                    rec.guarded("model", rec.note_output_layer, self)
            return outputs

        return __call__

    _wrap(layer_cls, "__init__", make_init)
    _wrap(layer_cls, "__call__", make_call)


def _wrap_loss_inputs(rec: Recorder, loss_cls) -> None:
    """Headroom of a loss's float16 ``y_pred`` (a custom loop may compute it outside any
    layer), reported under the loss's name, and of float16 ``y_true`` (data the script cast to
    float16 itself), under "<loss> targets"."""
    if os.environ.get("MPFIX_VERIFY_HEADROOM", "1") == "0":
        return

    def make_call(original):
        def __call__(self, y_true, y_pred, *args, **kwargs):
            if rec._depth() == 0:
                rec.guarded("loss-input", rec.on_layer_output, self, y_pred)
                rec.guarded("loss-targets", rec.on_layer_output, rec.targets_of(self), y_true)
            return original(self, y_true, y_pred, *args, **kwargs)

        return __call__

    _wrap(loss_cls, "__call__", make_call)


def _wrap_model(rec: Recorder, model_cls) -> None:
    for name in ("fit", "train_on_batch"):
        original = getattr(model_cls, name, None)
        if original is None or getattr(original, "__mpfix_original__", None) is not None:
            continue
        # fit is inherited from the backend trainer; rebinding it on Model covers every
        # user model class.
        wrapper = _make_entry(rec, name)(original)
        wrapper.__mpfix_original__ = original
        wrapper.__name__ = name
        wrapper.__doc__ = original.__doc__
        setattr(model_cls, name, wrapper)
