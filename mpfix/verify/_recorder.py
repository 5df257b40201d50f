"""Child side: the ``Recorder``, which turns what the hooks (``_hooks``, ``_keras_hooks``)
see into rows of the channel and the rows into JSON-lines ``step``/``layer`` events, and
decides when the run stops (``StopVerify``).

One call of the outermost optimizer is one step: its gradients are summarised in-graph and
written with the pending loss (the one ``tape.gradient`` was taken of) and the current loss
scale as one row. ``flush`` reads new rows back in eager code and stops the run when enough
steps were seen or a non-finite loss appeared.

Headroom: the Keras layer hooks (``_keras_hooks._wrap_layers``) hand each float16 layer
output to ``Recorder.on_layer_output``, which keeps ``reduce_max(abs(output))`` (a tensor of
the graph being traced) per thread; the next optimizer update in the same graph writes the
largest of them and its layer's index into its row.
"""

from __future__ import annotations

import linecache
import math
import os
import sys
import threading
import time
import weakref

import tensorflow as tf

from mpfix.verify._channel import MAX_OPTIMIZER_BIT, Channel
from mpfix.verify._measure_ops import _flat_tensors, _gradient_summary, _local_replicas, _on_replica0, _same_graph


_HERE = os.path.dirname(os.path.abspath(__file__))


class StopVerify(BaseException):
    """Raised into the user's script to end it; a BaseException so ``except Exception``
    in the script does not swallow it."""


# flush reads the rows at least this often (rows, and a progress line, reach the parent)
# and whenever this many are waiting.
DRAIN_BATCH = 256
DRAIN_INTERVAL_S = 1.0


class Recorder:
    """Collects steps, writes them as JSON-lines events, decides when to stop."""

    def __init__(self, emit, max_steps: int, locate: bool = False) -> None:
        self.emit = emit
        self.max_steps = max_steps
        self.locate = locate
        self.channel = Channel()
        self.steps = 0
        self.stop_reason: str | None = None
        self.entries: set[str] = set()
        self.generations: set[int] = set()
        self._local = threading.local()
        self._scaled: dict[int, tuple] = {}
        self._dynamic_scaled: set[int] = set()
        self._inner: "weakref.WeakSet" = weakref.WeakSet()
        # Outermost optimizer calls in progress in any thread: a loss scale optimizer's
        # inner apply may run in another thread (MirroredStrategy's merge_call runs it in
        # the main thread while the replica threads wait), where the depth guard is 0.
        self._outer_calls = 0
        self._outer_lock = threading.Lock()
        self._optimizers: dict[int, int] = {}
        self._last_seq: dict[int, float] = {}
        self._errors: set[str] = set()
        self._alarms = 0
        self._drained_at = self.started = time.monotonic()
        self._drain_time = 0.0
        self._flush_lock = threading.RLock()
        # The folder of the user's script: layers built by code there get a source line.
        self.user_root: str | None = None
        # Each Keras generation adds one: optimizer -> (scale, dynamic, grads_scaled) or None.
        self.scale_resolvers: list = []
        # Gradients returned by tape.gradient -> (gradient, the loss they are of): an
        # optimizer applying those gradients gets that loss (a DCGAN step computes both
        # losses and both gradients before either update).
        self._grad_loss: dict[int, tuple] = {}
        # Headroom: layer -> index, the layers' records, and the float16 output maxima
        # measured in the current step (per thread: MirroredStrategy traces replicas in
        # threads).
        self._layer_index: dict[int, int] = {}
        self._layer_refs: list = []
        self._origins: dict[int, dict] = {}
        self._targets: dict[int, LossTargets] = {}
        self.extra_roots: tuple[str, ...] = ()
        # False under `verify --workers`: every worker runs to the step limit (see _bootstrap).
        self.stop_on_nonfinite = True
        # Per-op float16 evidence of traced steps (_evidence.py); not under --locate,
        # whose eager re-run traces nothing.
        self.evidence = None
        if not locate:
            from mpfix.verify import _evidence

            if _evidence.enabled():
                self.evidence = _evidence.Evidence(self)

    def guarded(self, where: str, fn, *args):
        """A failing measurement must not break the user's step: report it once."""
        try:
            return fn(*args)
        except Exception as exc:
            if where not in self._errors:
                self._errors.add(where)
                self.emit({"event": "hook-error", "where": where, "error": repr(exc)[:500]})

    # --- depth guard: only the outermost optimizer call of a thread is a step ---
    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _enter(self) -> None:
        self._local.depth = self._depth() + 1

    def _leave(self) -> None:
        self._local.depth = self._depth() - 1

    def _scale_info(self, optimizer):
        for resolve in self.scale_resolvers:
            info = resolve(optimizer)
            if info is not None:
                return info
        return 1.0, False, False

    # --- scaled losses ---
    def note_scaled(self, scaled, loss, dynamic: bool) -> None:
        # Strong references keep the ids from being reused until the next step.
        self._scaled[id(scaled)] = (scaled, loss)
        if dynamic:
            self._dynamic_scaled.add(id(scaled))

    def is_dynamic_scaled(self, target) -> bool:
        return id(target) in self._dynamic_scaled

    def note_inner(self, optimizer) -> None:
        self._inner.add(optimizer)

    def is_step(self, optimizer) -> bool:
        """Is a call of ``optimizer`` a step? The outermost call of its thread is, except
        a loss scale optimizer's inner optimizer called while any outer call is running
        (that outer call is the step). A script that steps ``lso.inner_optimizer``
        itself (accumulation loops do) makes steps through it."""
        if self._depth() != 0:
            return False
        if optimizer not in self._inner:
            return True
        with self._outer_lock:
            return self._outer_calls == 0

    def begin_outer(self) -> None:
        with self._outer_lock:
            self._outer_calls += 1

    def end_outer(self) -> None:
        with self._outer_lock:
            self._outer_calls -= 1

    # --- tape ---
    def on_gradient(self, target):
        """Set the pending loss from a gradient target; returns the loss tensor (or None)."""
        values = []
        for t in _flat_tensors(target):
            entry = self._scaled.get(id(t))
            loss = entry[1] if entry is not None else t
            try:
                loss = tf.convert_to_tensor(loss)
            except (TypeError, ValueError):
                return None
            if not loss.dtype.is_floating:
                return None
            loss = tf.cast(loss, tf.float32)
            values.append(loss if loss.shape.rank == 0 else tf.reduce_mean(loss))
        if not values:
            return None
        loss = values[0] if len(values) == 1 else tf.add_n(values)
        _on_replica0(self.channel.set_loss, loss, other=self.channel.set_replica_loss)
        return loss

    GRAD_LOSS_MAX = 512

    def note_gradients(self, grads, loss) -> None:
        """Remember which loss ``grads`` (tape.gradient's result) are the gradients of."""
        if loss is None:
            return
        if len(self._grad_loss) > self.GRAD_LOSS_MAX:
            self._grad_loss.clear()
        for g in _flat_tensors(grads):
            self._grad_loss[id(g)] = (g, loss)

    def carry_gradients(self, before, after) -> None:
        """``after`` are ``before`` transformed (unscaled): same loss."""
        for b, a in zip(_flat_tensors(before), _flat_tensors(after)):
            entry = self._grad_loss.get(id(b))
            if entry is not None:
                self._grad_loss[id(a)] = (a, entry[1])

    def _loss_of(self, grads):
        """The loss these gradients were taken of, when tape.gradient returned them in this
        graph (None: fall back to the last loss seen)."""
        found = None
        for g in _flat_tensors(grads):
            g = g.values if isinstance(g, tf.IndexedSlices) else g
            entry = self._grad_loss.pop(id(g), None)
            if entry is not None and found is None:
                found = entry[1]
        if found is None or not _same_graph(found):
            return None
        return found

    # --- layers (headroom) ---
    def note_layer_origin(self, layer) -> None:
        """Where the user's code built ``layer`` (the innermost frame under the script's
        folder), for the report."""
        roots = tuple(r for r in (self.user_root, *self.extra_roots) if r)
        if not roots:
            return
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            # A project layer's own __init__ (super().__init__) is not where it was built.
            if (filename.startswith(roots) and not filename.startswith(_HERE) and "site-packages" not in filename
                    and frame.f_locals.get("self") is not layer):
                self._origins[id(layer)] = {"file": filename, "line": frame.f_lineno}
                return
            frame = frame.f_back

    def targets_of(self, loss) -> "LossTargets":
        """One stand-in per loss object for the targets it is given, measured as a layer's output."""
        targets = self._targets.get(id(loss))
        if targets is None:
            targets = self._targets[id(loss)] = LossTargets(f"{getattr(loss, 'name', None) or type(loss).__name__} targets")
        return targets

    def layer_index(self, layer) -> int:
        index = self._layer_index.get(id(layer))
        if index is None:
            index = self._layer_index[id(layer)] = len(self._layer_index)
            self._layer_refs.append(layer)
            self.emit_layer(layer, index)
        return index

    def _built_at(self, layer) -> dict:
        """Where the project built ``layer``: file, line, code (empty: not in the project's files)."""
        origin = self._origins.get(id(layer), {})
        code = ""
        if origin:
            try:
                code = linecache.getline(origin["file"], origin["line"]).strip()
            except Exception:
                code = ""
        return {"file": origin.get("file"), "line": origin.get("line"), "code": code}

    def emit_layer(self, layer, index: int, output_of: str | None = None) -> None:
        event = {
            "event": "layer",
            "index": index,
            "name": getattr(layer, "name", None),
            "class": type(layer).__name__,
            **self._built_at(layer),
        }
        cell = getattr(layer, "cell", None)
        if cell is not None and cell is not layer and hasattr(cell, "compute_dtype"):
            # A recurrent layer's loop runs its cell, a layer with a dtype policy of its own (keras.layers.RNN(cell)):
            # a cell the project built keeps its float16 policy whatever the RNN's dtype is.
            built = self._built_at(cell)
            if built["file"]:
                event["cell"] = {"name": getattr(cell, "name", None), "class": type(cell).__name__, **built}
        if output_of:
            event["output_of"] = output_of
        if hasattr(layer, "layers") and callable(getattr(layer, "fit", None)):
            # A model (Functional, Sequential): a container whose own dtype does not reach the layers inside it.
            event["model"] = True
        self.emit(event)

    def note_output_layer(self, model) -> None:
        """The last layer of a model that was called is its output layer (Sequential; the
        usual case of functional models)."""
        try:
            layers = model.layers
        except Exception:
            return
        if not layers:
            return
        last = layers[-1]
        index = self._layer_index.get(id(last))
        if index is not None and not getattr(self, "_outputs_noted", set()).__contains__(index):
            self.__dict__.setdefault("_outputs_noted", set()).add(index)
            self.emit_layer(last, index, output_of=getattr(model, "name", "model"))

    def on_layer_output(self, layer, outputs) -> None:
        """Record max |value| of a float16 layer's outputs for this step's row."""
        if getattr(self._local, "in_layer_hook", False):
            return  # tf.abs on a symbolic Keras 2 tensor is itself a (TFOpLambda) layer call
        halves = [
            t
            for t in _flat_tensors(outputs)
            if tf.is_tensor(t)
            and getattr(t, "dtype", None) == tf.float16
            and type(t).__name__ != "KerasTensor"  # functional-model construction, not data
        ]
        if not halves:
            return
        self._local.in_layer_hook = True
        try:
            index = self.layer_index(layer)
            # The scope keeps these ops out of the per-op evidence (_evidence.py).
            with tf.name_scope("mpfix"):
                peaks = [tf.reduce_max(tf.abs(t)) for t in halves]
                peak = peaks[0] if len(peaks) == 1 else tf.reduce_max(tf.stack(peaks))
        finally:
            self._local.in_layer_hook = False
        pending = getattr(self._local, "activations", None)
        if pending is None:
            pending = self._local.activations = []
        if len(pending) > self.GRAD_LOSS_MAX:
            del pending[: len(pending) // 2]
        pending.append((index, peak))

    def _take_activations(self):
        """(max, layer index) tensors over this step's float16 outputs in this graph."""
        pending = getattr(self._local, "activations", None) or []
        self._local.activations = []
        usable = [(i, v) for i, v in pending if _same_graph(v)]
        if not usable:
            return tf.constant(-1.0), tf.constant(-1.0)
        values = tf.cast(tf.stack([v for _, v in usable]), tf.float32)
        where = tf.argmax(values, output_type=tf.int32)
        indices = tf.constant([float(i) for i, _ in usable])
        return tf.reduce_max(values), tf.gather(indices, where)

    # --- optimizer ---
    def on_apply(self, optimizer, grads) -> None:
        index = self._optimizers.setdefault(id(optimizer), len(self._optimizers))
        scale, dynamic, grads_scaled = self._scale_info(optimizer)
        self._scaled.clear()
        self._dynamic_scaled.clear()
        own_loss = self._loss_of(grads)
        activations = self._take_activations()
        self.channel.replicas = max(self.channel.replicas, _local_replicas())
        _on_replica0(
            self._write, index, scale, dynamic, grads_scaled, grads, own_loss, activations, other=self._write_replica
        )

    def _write(self, index, scale, dynamic, grads_scaled, grads, own_loss=None, activations=None) -> None:
        scale = tf.cast(tf.convert_to_tensor(scale), tf.float32)
        elements, nonfinite, zeros, sumsq = _gradient_summary(grads, scale if grads_scaled else None)
        if own_loss is not None:
            self.channel.set_loss(own_loss)
        loss, seq = self.channel.pending_loss()
        act_max, act_layer = activations if activations is not None else (tf.constant(-1.0), tf.constant(-1.0))
        # Alarm: what stops the run (non-finite loss, or non-finite gradients applied
        # without a dynamic scaler to skip them). A stale loss alarms only once: its own
        # step already did.
        alarm = tf.logical_not(tf.math.is_finite(loss))
        if not dynamic:
            alarm = tf.logical_or(alarm, nonfinite > 0)
        values = [
            loss, seq, scale, tf.constant(1.0 if dynamic else 0.0), elements, nonfinite, zeros, sumsq, act_max, act_layer
        ]
        self.channel.write(index, values, alarm)
        if self.channel.replicas > 1:
            self.channel.write_replica(0, [loss, elements, nonfinite, zeros, sumsq, act_max, act_layer], tf.constant(False))

    def _write_replica(self, replica, index, scale, dynamic, grads_scaled, grads, own_loss=None, activations=None) -> None:
        """Replica ``replica`` (> 0) of a MirroredStrategy: its own row (see _channel)."""
        scale = tf.cast(tf.convert_to_tensor(scale), tf.float32)
        elements, nonfinite, zeros, sumsq = _gradient_summary(grads, scale if grads_scaled else None)
        # The loss this replica's gradient hook saw (its own_loss may be another
        # replica's: all replicas share one graph).
        loss = self.channel.replica_loss(replica)
        act_max, act_layer = activations if activations is not None else (tf.constant(-1.0), tf.constant(-1.0))
        alarm = tf.logical_not(tf.math.is_finite(loss))
        if not dynamic:
            alarm = tf.logical_or(alarm, nonfinite > 0)
        self.channel.write_replica(replica, [loss, elements, nonfinite, zeros, sumsq, act_max, act_layer], alarm)

    # --- reading rows back ---
    def flush(self, may_stop: bool = True, force: bool = False) -> None:
        """Read new rows when they are needed (cheap when they are not: one variable read),
        record them, and stop the script (``StopVerify``) when a stop reason appeared."""
        # The watchdog thread reads rows too (a script hanging after some steps).
        with self._flush_lock:
            if self.stop_reason is None:
                state = self.channel.poll()
                if state is not None:
                    self._take(state, force)
            if force and self.evidence is not None:
                self.guarded("evidence-emit", self.evidence.emit)
        if may_stop and self.stop_reason is not None and threading.current_thread() is threading.main_thread():
            raise StopVerify(self.stop_reason)

    def _take(self, state, force: bool) -> None:
        written, steps, alarms, mask = state
        waiting = written - self.channel.read
        if waiting <= 0:
            return
        now = time.monotonic()
        at_limit = steps > self.max_steps or (
            steps == self.max_steps and mask == (1 << min(len(self._optimizers), MAX_OPTIMIZER_BIT + 1)) - 1
        )
        if not (
            force
            or at_limit
            or alarms != self._alarms
            or waiting >= DRAIN_BATCH
            or now - self._drained_at >= DRAIN_INTERVAL_S
        ):
            return
        self._alarms = alarms
        self._drained_at = now
        self._drain_time = now - self.started
        events = [e for e in map(self._record, self.channel.drain(written)) if e is not None]
        if events:
            many = getattr(self.emit, "many", None)
            if many is not None:
                many(events)
            else:
                for event in events:
                    self.emit(event)
        if at_limit and self.stop_reason is None:
            self.stop_reason = "steps"

    def _record(self, raw: list) -> dict | None:
        """The step event of one row (None when the row is past a stop), and the stop
        reason the row gives."""
        if self.stop_reason is not None:
            return None
        optimizer, step, loss, seq, scale, dynamic, elements, nonfinite, zeros, sumsq, act_max, act_layer = raw[:12]
        # Under MirroredStrategy the channel appends the replicas with a non-finite value.
        bad_replicas = raw[12] if len(raw) > 12 else []
        optimizer, step = int(optimizer), int(step)
        if step >= self.max_steps:
            self.stop_reason = "steps"
            return None
        fresh = seq > 0 and seq != self._last_seq.get(optimizer)
        self._last_seq[optimizer] = seq
        loss = loss if fresh else None
        dynamic = bool(dynamic)
        event = {
            "event": "step",
            "step": step,
            "optimizer": optimizer,
            "loss": _json_float(loss),
            "loss_scale": _json_float(scale),
            "dynamic": dynamic,
            "skipped": dynamic and nonfinite > 0,
            "grad_elements": int(elements),
            "nonfinite_fraction": nonfinite / elements if elements else 0.0,
            "zero_fraction": zeros / elements if elements else 0.0,
            # Any non-finite entry makes the global norm non-finite.
            "grad_norm": _json_float(math.sqrt(sumsq) if nonfinite == 0 else math.inf),
            # When the row was read (seconds since the hooks were installed): rows are read
            # in batches, so step times come from the spread of these (RunResult.step_time).
            "t": round(self._drain_time, 4),
        }
        if bad_replicas:
            event["replicas_nonfinite"] = [int(r) for r in bad_replicas]
        if act_max >= 0 or not math.isfinite(act_max):
            event["act_max"] = _json_float(act_max)
            event["act_layer"] = int(act_layer)
        self.steps = step + 1
        if not self.stop_on_nonfinite:
            pass
        elif loss is not None and not math.isfinite(loss):
            self.stop_reason = "non-finite loss"
        elif nonfinite > 0 and not dynamic:
            # Applied, not skipped: the weights are now non-finite.
            self.stop_reason = "non-finite gradients applied"
        return event


class LossTargets:
    """The targets (``y_true``) a loss is given: float16 only where the script casts its data to
    float16 itself (a ``tf.data`` map, ``astype``), which no policy undoes, not even the float32
    baseline's; measured like a layer's output so a target past 65504 is seen as inf."""

    def __init__(self, name: str) -> None:
        self.name = name


def _json_float(x):
    """JSON has no NaN/Inf: encode them as strings the parent decodes."""
    if x is None:
        return None
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
