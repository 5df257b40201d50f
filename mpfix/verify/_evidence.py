"""Child side: per-op float16 evidence in the traced graphs of the training step.

When ``tape.gradient`` is called while a ``tf.function`` (or Keras ``fit``'s train
function) is being traced, the forward pass of the step is already in the graph. This
module walks the ops added since the last walk and, for every op with a float16 output
(layout ops such as Identity/Reshape left out: they cannot create a value), adds to that
graph:

* the largest ``|value|`` of the op's output, with NaN/Inf turned into +inf, reduced in
  the graph (the outputs are concatenated and reduced by one ``unsorted_segment_max``);
  the same for the float inputs of those ops that no measured op produced (the step's
  data), so "finite inputs, non-finite output" can be told;
* three small variables per trace, updated each step: the peak, the step of the peak and
  the first step whose output was non-finite.

Constants are judged at trace time, for free: a float16 ``Const`` holding inf, and a
``Cast`` to float16 of a constant that becomes inf (``|x| > 65504``) or 0 (``0 < |x| <
2**-24``).

Every op carries the line of the user's project that created it: the innermost frame of
``op.traceback`` under the project's folder (imported modules of the project included,
installed packages not). An op created by a library layer (Keras ``Dense``) whose innermost
project frame is the line that *called* the layer (``model.fit(...)``, ``self.dense(h)``)
is attributed to that layer, whose construction line is where ``dtype="float32"`` goes.

Nothing is read back per step: ``emit`` reads the variables once, at the end of the run.
``MPFIX_VERIFY_OPS=0`` turns it off (``benchmarks/verify_overhead.py --ops`` times both).
"""

from __future__ import annotations

import linecache
import math
import os
import sys
import threading
import weakref

import tensorflow as tf
from tensorflow.python.framework import tensor_util
from tensorflow.python.ops import resource_variable_ops

from mpfix.verify._channel import STEPS

FLOAT16_MAX = 65504.0
# The smallest positive float16 (subnormal): anything below half of it rounds to 0.
FLOAT16_TINY = 2.0**-24
# Ops that move or relabel values without computing new ones: they cannot create an
# inf, and measuring them would count the same tensor twice.
PASSTHROUGH = frozenset(
    {
        "Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "Transpose", "StopGradient",
        "Snapshot", "PreventGradient", "EnsureShape", "StridedSlice", "Slice", "GatherV2", "Pack",
        "Unpack", "ConcatV2", "Split", "SplitV", "Tile", "BroadcastTo", "ZerosLike", "OnesLike",
        "Fill", "Shape", "Size", "Rank",
    }
)
# Ops that produce a value out of nothing the step computes.
SOURCES = frozenset({"Placeholder", "Const", "ReadVariableOp", "VarHandleOp", "NoOp", "VariableV2"})
# Above this many elements a step's float16 outputs are reduced tensor by tensor instead
# of concatenated (no copy of every activation of a big model).
CONCAT_MAX_ELEMENTS = 1 << 22
# Ops reported per trace besides the non-finite ones: the largest peaks.
TOP_PEAKS = 12
_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python")
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def enabled() -> bool:
    return os.environ.get("MPFIX_VERIFY_OPS", "1") != "0"


def project_root(folder: str) -> str:
    """The project holding ``folder``: the nearest folder above it with a project marker,
    else ``folder`` itself (a script alone)."""
    current = os.path.abspath(folder)
    while True:
        if any(os.path.exists(os.path.join(current, marker)) for marker in _PROJECT_MARKERS):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.abspath(folder)
        current = parent


def _version(graph) -> int:
    try:
        return int(graph.version)
    except Exception:
        return 0


class Evidence:
    """Per-op measurements of the traced training step, for one child run."""

    def __init__(self, rec) -> None:
        self.rec = rec
        self._seen: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._traces: list[tuple[list[dict], int, tuple]] = []
        self._constants: list[dict] = []
        self._calls: list[tuple] = []
        self._local = threading.local()
        self._emitted = False
        self._roots: tuple[str, ...] | None = None
        self._offsets: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def _last_id(self, graph) -> int:
        """The id of the newest op of ``graph``: ``Graph.version`` counts the ops, and ids
        are that count plus a fixed offset (1 in TF 2.21), measured once per graph."""
        offset = self._offsets.get(graph)
        if offset is None:
            ops = graph.get_operations()
            offset = self._offsets[graph] = (ops[-1]._id - _version(graph)) if ops else 1
        return _version(graph) + offset

    # --- where ops come from ---
    def roots(self) -> tuple[str, ...]:
        if self._roots is None:
            found = [r for r in (self.rec.user_root, *self.rec.extra_roots) if r]
            if self.rec.user_root:
                found.append(project_root(self.rec.user_root))
            self._roots = tuple(os.path.join(os.path.abspath(r), "") for r in found)
        return self._roots

    def is_project(self, filename: str) -> bool:
        path = os.path.abspath(filename)
        return (
            path.startswith(self.roots())
            and not path.startswith(_HERE)
            and not any(marker in path for marker in _LIBRARY)
        )

    def caller(self) -> tuple[str, int] | None:
        """The innermost project frame of the running Python stack."""
        frame = sys._getframe(2)
        while frame is not None:
            if self.is_project(frame.f_code.co_filename):
                return frame.f_code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None

    def _origin(self, op) -> dict:
        try:
            frames = list(op.traceback)
        except Exception:
            return {}
        for frame in reversed(frames):
            if self.is_project(frame.filename):
                return {"file": os.path.abspath(frame.filename), "line": frame.lineno, "function": frame.name}
        return {}

    # --- layer calls (trace time only) ---
    def layer_call_begin(self):
        """(graph, first op id) before a layer call inside a graph being traced, else None."""
        if tf.executing_eagerly():
            return None
        graph = tf.compat.v1.get_default_graph()
        return graph, self._last_id(graph)

    def layer_call_end(self, begun, layer) -> None:
        graph, start = begun
        end = self._last_id(graph)
        if end <= start:
            return
        module = sys.modules.get(type(layer).__module__)
        defined = getattr(module, "__file__", None) or ""
        # A project layer's ops have their own project lines inside `call`: it is only
        # their owner (where dtype="float32" would go), never where they are reported.
        library = not (defined and self.is_project(defined))
        caller = self.caller() if library else None
        is_model = hasattr(layer, "layers") and callable(getattr(layer, "fit", None))
        self._calls.append((weakref.ref(graph), start, end, layer, caller, library, is_model))

    def _layer_of(self, graph, op_id: int, origin: dict):
        """(the library layer whose call created op ``op_id`` from the project line that
        called it, the innermost layer other than a model whose call created it); either
        may be None."""
        where, owner = None, None
        for ref, start, end, layer, caller, library, is_model in self._calls:
            if ref() is not graph or not start < op_id <= end:
                continue
            if not is_model and (owner is None or end - start < owner[1] - owner[0]):
                owner = (start, end, layer)
            if not library:
                continue
            if caller is not None and origin and (origin["file"], origin["line"]) != (os.path.abspath(caller[0]), caller[1]):
                continue
            if where is None or end - start < where[1] - where[0]:
                where = (start, end, layer)
        return (None if where is None else where[2]), (None if owner is None else owner[2])

    # --- the walk, at tape.gradient inside a trace ---
    def on_gradient(self) -> None:
        if tf.executing_eagerly() or getattr(self._local, "busy", False):
            return
        graph = tf.compat.v1.get_default_graph()
        start = self._seen.get(graph, 0)
        top = self._last_id(graph)
        self._seen[graph] = top
        ops = [op for op in graph.get_operations() if start < op._id <= top]
        self._local.busy = True
        try:
            records, slots = self._select(graph, ops)
            if records:
                with tf.name_scope("mpfix_evidence"):
                    self._instrument(records, slots)
        finally:
            self._local.busy = False

    def _select(self, graph, ops) -> tuple[list[dict], list]:
        records: list[dict] = []
        slot_of: dict[int, int] = {}
        slots: list = []
        measured = []
        for op in ops:
            if "mpfix" in op.name or "mpfix_evidence" in op.name:
                continue
            if op.type == "Const" or (op.type == "Cast" and op.inputs and op.inputs[0].op.type == "Const"):
                self._check_constant(graph, op)
            if op.type in PASSTHROUGH or op.type in SOURCES or not op.outputs:
                continue
            # Its first float16 output: a `tf.while_loop`'s loop variables follow its int32 counter (turn 16's
            # power_iteration: a vector grown past 65504 in the body came out of `While` as its second output).
            out = next((t for t in op.outputs if t.dtype == tf.float16), None)
            if out is None:
                continue
            slot_of[id(out)] = len(slots)
            slots.append(out)
            measured.append((op, out))
        for op, out in measured:
            inputs = []
            for t in op.inputs:
                source = _through_passthrough(t)
                if not source.dtype.is_floating:
                    continue
                if id(source) not in slot_of:
                    if source.op.type in ("ReadVariableOp", "Const", "VarHandleOp"):
                        continue  # weights and constants: judged elsewhere (a NaN weight stops the run first)
                    slot_of[id(source)] = len(slots)
                    slots.append(source)
                inputs.append(slot_of[id(source)])
            record = self._describe(graph, op, slot_of[id(out)], inputs)
            if all(t.dtype in (tf.resource, tf.variant) for t in op.inputs):
                # Its values are read from a resource (a tf.data iterator's next batch), not computed: a
                # non-finite value it gives was made before the step (the input pipeline), never by this op.
                record["enters"] = True
            records.append(record)
        return records, slots

    def _describe(self, graph, op, slot: int, inputs: list[int]) -> dict:
        origin = self._origin(op)
        record = {"type": op.type, "name": op.name, "slot": slot, "inputs": inputs, **origin}
        layer, owner = self._layer_of(graph, op._id, origin)
        if layer is not None:
            record["layer"] = self.rec.layer_index(layer)
        if owner is not None:
            record["owner"] = self.rec.layer_index(owner)
        return record

    def _check_constant(self, graph, op) -> None:
        """A float16 constant holding inf, or a constant cast to float16 that becomes inf/0."""
        try:
            if op.type == "Const":
                if op.outputs[0].dtype != tf.float16:
                    return
                value = tensor_util.MakeNdarray(op.get_attr("value"))
                original = None
            else:
                if op.outputs[0].dtype != tf.float16:
                    return
                original = tensor_util.MakeNdarray(op.inputs[0].op.get_attr("value"))
                value = original.astype("float16")
        except Exception:
            return
        flat_value = value.reshape(-1)
        flat_original = original.reshape(-1) if original is not None else None
        if flat_value.size > 4096:
            return
        for k, v in enumerate(flat_value.tolist()):
            before = None if flat_original is None else float(flat_original[k])
            if math.isinf(v) and (before is None or math.isfinite(before)):
                became = "inf" if v > 0 else "-inf"
            elif v == 0 and before is not None and before != 0 and math.isfinite(before):
                became = "0"
            else:
                continue
            origin = self._origin(op)
            event = {"event": "f16-const", "type": op.type, "name": op.name, "became": became, "original": before, **origin}
            layer, owner = self._layer_of(graph, op._id, origin)
            if layer is not None:
                event["layer"] = self.rec.layer_index(layer)
            if owner is not None:
                event["owner"] = self.rec.layer_index(owner)
            self._constants.append(event)
            return

    def _instrument(self, records: list[dict], slots: list) -> None:
        peaks = _peaks(slots)
        size = len(slots)
        with tf.init_scope():
            new = resource_variable_ops.ResourceVariable
            peak = new(tf.zeros([size]), trainable=False, name="mpfix_op_peak")
            peak_step = new(tf.fill([size], -1), trainable=False, name="mpfix_op_peak_step")
            first_bad = new(tf.fill([size], -1), trainable=False, name="mpfix_op_first_bad")
        # The channel's step counter before this step's row is written: this step's index.
        step = tf.cast(self.rec.channel._variables()[1].read_value()[STEPS], tf.int32)
        bad = tf.math.is_inf(peaks)
        finite = tf.where(bad, tf.zeros_like(peaks), peaks)
        before = peak.read_value()
        peak_step.assign(tf.where(finite > before, tf.fill([size], step), peak_step.read_value()))
        peak.assign(tf.maximum(before, finite))
        seen = first_bad.read_value()
        first_bad.assign(tf.where(tf.logical_and(seen < 0, bad), tf.fill([size], step), seen))
        self._traces.append((records, size, (peak, peak_step, first_bad)))

    # --- the end of the run ---
    def emit(self) -> None:
        if self._emitted:
            return
        self._emitted = True
        events = list(self._constants)
        for trace, (records, _, variables) in enumerate(self._traces):
            try:
                peak, peak_step, first_bad = (v.numpy().tolist() for v in variables)
            except Exception:
                continue
            ranked = sorted(range(len(records)), key=lambda i: -peak[records[i]["slot"]])[:TOP_PEAKS]
            for order, record in enumerate(records):
                slot = record["slot"]
                if first_bad[slot] < 0 and order not in ranked:
                    continue
                inputs_bad = [first_bad[i] for i in record["inputs"] if first_bad[i] >= 0]
                born = first_bad[slot] >= 0 and all(s > first_bad[slot] for s in inputs_bad)
                event = {
                    "event": "op",
                    "trace": trace,
                    "order": order,
                    **{k: v for k, v in record.items() if k not in ("slot", "inputs")},
                    "peak": peak[slot],
                    "peak_step": peak_step[slot],
                    "first_bad": first_bad[slot],
                    "born": born,
                }
                events.append(event)
        for event in events:
            if event.get("file") and event.get("line"):
                event["code"] = linecache.getline(event["file"], event["line"]).strip()
        if events:
            many = getattr(self.rec.emit, "many", None)
            if many is not None:
                many(events)
            else:
                for event in events:
                    self.rec.emit(event)


def _through_passthrough(tensor):
    """The tensor a chain of layout ops (Identity, Reshape...) started from."""
    for _ in range(64):
        op = tensor.op
        if op.type not in PASSTHROUGH or not op.inputs or op.type in ("Shape", "Size", "Rank", "Fill"):
            return tensor
        tensor = op.inputs[0]
    return tensor


# Segment ids of up to this many elements are a constant of the graph (no op per step).
CONST_IDS_MAX = 1 << 16


def _peaks(slots: list):
    """float32 [len(slots)]: max |value| of each tensor, +inf where any entry is NaN/Inf.
    One concatenation and one segment reduction per dtype; the per-group results are put
    back in slot order by one gather (no op per slot beyond its reshape)."""
    import numpy as np

    groups: dict = {}
    for index, t in enumerate(slots):
        groups.setdefault(t.dtype, []).append(index)
    parts, order = [], []
    for dtype, members in groups.items():
        sizes = [slots[i].shape.num_elements() for i in members]
        known = None not in sizes
        if len(members) > 1 and (not known or sum(sizes) <= CONCAT_MAX_ELEMENTS):
            flat = tf.concat([tf.reshape(slots[i], [-1]) for i in members], 0)
            if known and sum(sizes) <= CONST_IDS_MAX:
                ids = tf.constant(np.repeat(np.arange(len(members), dtype=np.int32), sizes))
            else:
                counts = tf.constant(sizes, tf.int32) if known else tf.stack(
                    [tf.size(slots[i], out_type=tf.int32) for i in members])
                ids = tf.repeat(tf.range(len(members)), counts)
            magnitude = tf.where(tf.math.is_finite(flat), tf.abs(flat), tf.constant(math.inf, dtype))
            parts.append(tf.cast(tf.math.unsorted_segment_max(magnitude, ids, len(members)), tf.float32))
        else:
            for i in members:
                t = slots[i]
                magnitude = tf.where(tf.math.is_finite(t), tf.abs(t), tf.constant(math.inf, dtype))
                parts.append(tf.reshape(tf.cast(tf.reduce_max(magnitude), tf.float32), [1]))
        order.extend(members)
    values = parts[0] if len(parts) == 1 else tf.concat(parts, 0)
    if order == sorted(order):
        return values
    position = {slot: k for k, slot in enumerate(order)}
    return tf.gather(values, tf.constant([position[i] for i in range(len(slots))], tf.int32))
