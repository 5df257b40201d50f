"""A run that crashed because TensorFlow registers no float16 kernel for an op, and the layers repair makes float32.

Some ops have no ``T=DT_HALF`` kernel on the device (``LogMatrixDeterminant``: ``tf.linalg.slogdet``; MP208 lists
them statically, ``facts.ops``' ``float16_kernel``). Under ``mixed_float16`` a layer that calls one with its float16
compute dtype crashes; float32 runs the same script (turn 19: held-out glow_flow_k3, a Glow flow's invertible 1x1
convolution). TF 2.21 on CPU says, in a traced step (``fit``; the node's name scopes are the Keras layers' names)::

    No OpKernel was registered to support Op 'LogMatrixDeterminant' used by
    {{node StatefulPartitionedCall/flow_1/invertible_dense_1/LogMatrixDeterminant}} with these attrs: [T=DT_HALF]

and eagerly (no scopes: the crash's innermost frame is the op's line in the layer's method)::

    Could not find device for node: {{node LogMatrixDeterminant}} = LogMatrixDeterminant[T=DT_HALF]

The candidate is ``dtype="float32"`` on that layer, kept only when the next run is healthy and agrees with float32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mpfix.verify.repair_locate import owner_layer

_GRAPH = re.compile(r"No OpKernel was registered to support Op '(\w+)' used by \{\{node ([^}]+)\}\}"
                    r" with these attrs: \[[^\]]*\bT=DT_HALF\b")
_UNIQUIFIED = re.compile(r"_\d+$")
_EAGER = re.compile(r"Could not find device for node: \{\{node ([^}]+)\}\} = (\w+)\[[^\]]*\bT=DT_HALF\b")


@dataclass(frozen=True)
class MissingKernel:
    op: str  # the op type TensorFlow has no float16 kernel for
    scopes: tuple[str, ...]  # the node's name scopes, innermost first (empty eagerly)


def read(message: str | None) -> MissingKernel | None:
    """The op a crash's message says has no float16 kernel (None: another error)."""
    found = _GRAPH.search(message or "")
    if found:
        return MissingKernel(found.group(1), tuple(reversed(found.group(2).split("/")[:-1])))
    found = _EAGER.search(message or "")
    return MissingKernel(found.group(2), ()) if found else None


def layers(missing: MissingKernel, run, frame: dict | None, texts) -> list[dict]:
    """The layer the run built in the user's files that ran the op: the innermost name scope that is such a layer's
    name (or that name made unique); else (eagerly) the layer whose class's method holds the crash's innermost frame."""
    built = [layer for layer in (run.layers or {}).values() if layer.get("file") and layer.get("line")
             and not layer.get("model")] if run is not None else []
    by_name = {layer.get("name"): layer for layer in built}
    for scope in missing.scopes:
        # A traced step enters a layer's name scope again, and TensorFlow makes it unique: the one layer
        # `invertible_dense` runs under `invertible_dense_1` (its model `flow` under `flow_1`).
        for name in (scope, _UNIQUIFIED.sub("", scope)):
            if name in by_name:
                return [by_name[name]]
    if frame and frame.get("file") and frame.get("line"):
        text = texts(Path(frame["file"]))
        owner = owner_layer(text, int(frame["line"]), built) if text is not None else None
        if owner is not None:
            return [owner]
    return []
