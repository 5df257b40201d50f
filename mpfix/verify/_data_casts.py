"""Child side: the lines where the script's input pipeline casts its data to float16.

A policy casts inside the model; a ``tf.data`` map that casts the data itself
(``tf.cast(price, tf.float16)`` "for mixed precision") makes float16 values no policy undoes,
in the float32 baseline too: raw-unit targets past 65504 become inf before any step runs. The
ops of a map function are outside the traced step, so the per-op evidence never sees them.

``Dataset.map`` is wrapped: after TensorFlow traced the map function (its own graph, built
when ``map`` is called), the function's ``Cast`` ops to float16 from a wider type are read
with the project line that created them (``op.traceback``), and one ``data-cast`` event is
written per op. The user's function and the dataset are left exactly as they were: nothing is
added to the pipeline's graph (a captured variable there would break datasets that are
serialised, such as a distributed one).
"""

from __future__ import annotations

import linecache

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

# Cast sources a float16 cast narrows (a float16 or bfloat16 source is not the pipeline's doing).
_WIDER = frozenset({tf.float32, tf.float64, tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8, tf.uint16})


def install(rec, wrap) -> None:
    """Wrap ``Dataset.map`` (``wrap``: ``_hooks._wrap``) to report the float16 casts of map functions."""
    from mpfix.verify._evidence import Evidence

    origin = (rec.evidence or Evidence(rec))._origin
    seen: set = set()

    def make(original):
        def map(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            rec.guarded("data-casts", _report, result, origin, rec.emit, seen)
            return result

        return map

    wrap(dataset_ops.DatasetV2, "map", make)


def _report(dataset, origin, emit, seen: set) -> None:
    function = getattr(getattr(dataset, "_map_func", None), "function", None)
    graph = getattr(function, "graph", None)
    if graph is None:
        return
    per_line: dict = {}
    for op in graph.get_operations():
        if op.type != "Cast" or op.outputs[0].dtype != tf.float16 or op.inputs[0].dtype not in _WIDER:
            continue
        where = origin(op)
        if not where:
            continue
        key = (where["file"], where["line"])
        nth = per_line[key] = per_line.get(key, -1) + 1
        if (*key, nth) in seen:
            continue
        seen.add((*key, nth))
        emit({"event": "data-cast", **where, "nth": nth, "source": op.inputs[0].dtype.name,
              "code": linecache.getline(where["file"], where["line"]).strip()})
