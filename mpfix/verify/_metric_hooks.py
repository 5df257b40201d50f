"""Child side: the Keras metrics a run reports, as ``metrics`` events.

* ``fit`` (both Keras generations) gets one more callback, which reads the logs of every training batch after its
  step: the compiled metrics (a custom ``Metric`` subclass's ``result()`` included) and whatever a custom
  ``train_step`` returns in its logs dict. ``loss`` is left out (the tape hook measures it). The epoch and the batch
  ride along (Keras resets its metrics at batch 0).
* A custom loop reads its metrics itself: every ``Metric`` subclass the script defines gets its ``result`` wrapped
  (``__init_subclass__``), and a call from the project's own code, in eager code, is recorded (Keras's calls inside
  ``fit``/``evaluate`` are not: the callback has those).

Each event carries the optimizer step it follows (the channel's step counter, one cheap read). Where the project
wrote the metric, its ``update_state`` (or the model's own ``train_step``) is the metric's line (``metric-origin``
events). The parent judges the values (``metric_judge.py``).
"""

from __future__ import annotations

import linecache
import math
import os
import sys
import threading

import tensorflow as tf
from tensorflow.python.autograph.impl.api import autograph_artifact

from mpfix.verify._channel import STEPS

# fit(self, x, y, batch_size, epochs, verbose, callbacks, ...) in both generations: callbacks is argument 6.
CALLBACKS_AT = 5
# Frames between the caller of ``metric.result()`` and the wrapped method: tf_keras binds ``result`` per instance
# through metrics_utils.result_wrapper, base_metric's ``result_fn`` and autograph's ``converted_call``.
_WRAPPER_FILES = ("autograph/impl/api.py", "metrics/base_metric.py", "utils/metrics_utils.py", "util/tf_decorator.py")


def install(rec, model_cls, callback_cls, metric_cls) -> None:
    """Wrap ``model_cls.fit`` (already wrapped by ``_keras_hooks._wrap_model``) to add the metrics callback, and the
    ``result`` of the ``metric_cls`` subclasses defined from now on (the script's own)."""
    if os.environ.get("MPFIX_VERIFY_METRICS", "1") == "0":
        return
    original = getattr(model_cls, "fit", None)
    if original is None or getattr(original, "__mpfix_metrics__", False):
        return
    log = _MetricLog(rec)
    _wrap_subclass_results(log, metric_cls)

    class Callback(callback_cls):
        def on_epoch_begin(self, epoch, logs=None):
            log.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            rec.guarded("metrics", log.batch_end, self.model, batch, logs)

    def fit(self, *args, **kwargs):
        args, kwargs = _with_callback(args, kwargs, Callback())
        return original(self, *args, **kwargs)

    fit.__mpfix_metrics__ = True
    fit.__mpfix_original__ = getattr(original, "__mpfix_original__", original)
    fit.__name__, fit.__doc__ = "fit", original.__doc__
    setattr(model_cls, "fit", fit)


def _with_callback(args, kwargs, callback):
    if len(args) > CALLBACKS_AT:
        given = args[CALLBACKS_AT]
        if given is None or isinstance(given, (list, tuple)):
            args = (*args[:CALLBACKS_AT], [*(given or ()), callback], *args[CALLBACKS_AT + 1:])
        return args, kwargs
    given = kwargs.get("callbacks")
    if given is None or isinstance(given, (list, tuple)):
        kwargs = dict(kwargs, callbacks=[*(given or ()), callback])
    return args, kwargs


class _MetricLog:
    def __init__(self, rec) -> None:
        self.rec = rec
        self.epoch = 0
        self.placed: set[str] = set()

    def _step(self) -> int | None:
        """The optimizer step just taken (None before the first, or past the step limit)."""
        state = self.rec.channel.poll()
        if state is None or state[STEPS] <= 0 or state[STEPS] > self.rec.max_steps:
            return None
        return int(state[STEPS]) - 1

    def batch_end(self, model, batch, logs) -> None:
        step = self._step() if logs else None
        if step is None:
            return
        values = {}
        for name, value in logs.items():
            number = _scalar(value)
            if name != "loss" and number is not None:
                values[str(name)] = _json_float(number)
        if not values:
            return
        for name in values:
            if name not in self.placed:
                self.placed.add(name)
                self.rec.emit({"event": "metric-origin", "name": name, **self._origin(model, name)})
        self.rec.emit({"event": "metrics", "step": step, "epoch": int(self.epoch), "batch": int(batch),
                       "values": values})

    def result_read(self, metric, value, caller) -> None:
        """A custom loop's ``metric.result()`` in the project's eager code: one value at the step just taken."""
        roots = tuple(r for r in (self.rec.user_root, *self.rec.extra_roots) if r)
        for _ in range(16):
            if caller is None or not caller.f_code.co_filename.replace(os.sep, "/").endswith(_WRAPPER_FILES):
                break
            caller = caller.f_back
        if (caller is None or not roots or not caller.f_code.co_filename.startswith(roots)
                or "site-packages" in caller.f_code.co_filename):
            return
        number = _scalar(value)
        step = self._step() if number is not None else None
        name = str(getattr(metric, "name", None) or type(metric).__name__)
        if step is None:
            return
        if name not in self.placed:
            self.placed.add(name)
            place = self._user_place(type(metric), "update_state") or self._user_place(type(metric), "result")
            self.rec.emit({"event": "metric-origin", "name": name, "class": type(metric).__name__, "source": "metric",
                           **(place or {})})
        self.rec.emit({"event": "metrics", "step": step, "epoch": None, "batch": None, "values":
                       {name: _json_float(number)}})

    def _origin(self, model, name: str) -> dict:
        """Where the project wrote metric ``name``: its class's ``update_state``, else the model's ``train_step``
        that returned it; {} for a library metric."""
        metric = next((m for m in _metrics_of(model) if getattr(m, "name", None) == name), None)
        if metric is not None:
            place = self._user_place(type(metric), "update_state") or self._user_place(type(metric), "result")
            return {"class": type(metric).__name__, "source": "metric", **(place or {})}
        place = self._user_place(type(model), "train_step")
        return {"class": type(model).__name__, "source": "train_step", **place} if place else {}

    def _user_place(self, cls, method: str) -> dict | None:
        function = getattr(cls, method, None)
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        roots = tuple(r for r in (self.rec.user_root, *self.rec.extra_roots) if r)
        if code is None or not roots or not code.co_filename.startswith(roots) or "site-packages" in code.co_filename:
            return None
        line = code.co_firstlineno
        return {"file": code.co_filename, "line": line, "code": linecache.getline(code.co_filename, line).strip(),
                "method": method}


def _wrap_subclass_results(log: _MetricLog, metric_cls) -> None:
    """Every subclass of ``metric_cls`` defined from now on gets its own ``result`` wrapped (tf_keras's ``__new__``
    binds ``result`` per instance, so the class is patched before any instance exists)."""
    local = threading.local()

    def wrap(original):
        def result(self, *args, **kwargs):
            if not tf.executing_eagerly():
                # In a graph, autograph converts ``original`` as it would have without this (unconverted) wrapper.
                ag = tf.__internal__.autograph
                return ag.tf_convert(original, ag.control_status_ctx())(self, *args, **kwargs)
            value = original(self, *args, **kwargs)
            if not getattr(local, "busy", False) and log.rec._depth() == 0:
                local.busy = True  # a subclass's result calling super().result() is one read
                try:
                    log.rec.guarded("metric-result", log.result_read, self, value, sys._getframe(1))
                finally:
                    local.busy = False
            return value

        result.__name__, result.__qualname__, result.__doc__ = original.__name__, original.__qualname__, original.__doc__
        # tf_keras calls ``result`` through autograph, which would convert this wrapper (and the recording with it):
        # marked as autograph's own, it runs as written, and in a graph the conversion status stays the caller's.
        result = autograph_artifact(result)
        result.__mpfix_original__ = original
        return result

    def __init_subclass__(cls, **kwargs):
        super(metric_cls, cls).__init_subclass__(**kwargs)  # whatever the bases do (object's today, both generations)
        original = cls.__dict__.get("result")
        if callable(original) and getattr(original, "__mpfix_original__", None) is None:
            cls.result = wrap(original)

    metric_cls.__init_subclass__ = classmethod(__init_subclass__)


def _metrics_of(model):
    """The model's metrics and those inside its compiled-metrics containers (Keras 3's ``CompileMetrics``)."""
    seen, stack = [], list(getattr(model, "metrics", None) or [])
    while stack and len(seen) < 256:
        metric = stack.pop(0)
        seen.append(metric)
        inner = getattr(metric, "metrics", None)
        if isinstance(inner, (list, tuple)) and inner is not getattr(model, "metrics", None):
            stack.extend(m for m in inner if m is not metric)
    return seen


def _scalar(value):
    try:
        size = getattr(value, "size", None)
        if size is not None and size != 1:
            return None
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, AttributeError):
        return None


def _json_float(x: float):
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
