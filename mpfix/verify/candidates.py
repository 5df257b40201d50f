"""Which changes ``mpfix repair`` tries next, from the runtime evidence of the last run.

For an op (the first op whose finite inputs gave inf/NaN; else a constant that became
inf/0; else the op with the least float16 headroom), at that exact source node, in order:

1. the static rule's own fix for that line (the static analysis told the dtype policy the
   run used, so a policy set in another module counts);
2. a float32 island around the op's expression (not for an op a library layer built:
   its line is the layer's construction); for the value a ``call`` returns, first one with
   no cast back (the output stays float32);
3. ``dtype="float32"`` on the layer that built the op (a library layer, or the project
   layer whose ``call`` holds the expression).

For ``underflow`` and ``stalled`` (and skipped steps that keep growing, and a ``non-finite``
run whose applied gradients still carried a loss scale): the loss-scaling rules' fixes (MP1xx,
their display-only fixes included) on the files the run used; a fixed loss scale only as the last resort
when the run had a dynamic scale that misbehaved (collapsed, or kept skipping).
For ``diverged``: the static MP205 fix, then ``dtype="float32"`` on the model's output layer.
For ``non-finite`` at an op no layer built (the compiled loss, shown at the ``fit`` line): after
the candidates at its node, ``dtype="float32"`` on each of the model's output layers.
For ``crashed`` on a float16/float32 mix (``mix_crash``): a cast at each expression of the
crash's line that spells the mixed op, the float16 operand to float32 first (the float32
operand to the float16 one's dtype first inside a layer's method, as MP206 writes it).
For ``non-finite``, ``at-risk`` and ``diverged``, after those: each cast to float16 in the
script's ``tf.data`` map functions made a cast to float32 (``data_casts``), the cast the
child saw first on that line first.
"""

from __future__ import annotations

from pathlib import Path

from mpfix.verify import data_casts, layer_losses, missing_kernel, mix_crash
from mpfix.verify.changes import Change, ChangeKind, static_findings
from mpfix.verify.evidence import Kind, RuntimeFinding
from mpfix.verify.frames import notebook_place
from mpfix.verify.islands import DIVIDING
from mpfix.verify.verdict import SCALED_CAUSE

# The fixed scale of the last resort (escalate.FIXED_SCALE: well below 65504 / typical
# gradient magnitudes).
FIXED_SCALE = 1024.0
# verdict.py's evidence kind of an at-risk verdict from a falling loss scale.
SCALE_TREND = "loss-scale"


def policy_of(run) -> str | None:
    """The mixed policy the run used (the static analysis is told, so rules that need a
    float16 policy fire where the policy is set in another module)."""
    policies = ((run.end or {}).get("policies") or {}).values() if run is not None else ()
    for name in policies:
        if name in ("mixed_float16", "float16"):
            return "mixed_float16"
    return None


def keras_of(run) -> str:
    """The Keras generation the run used ("2"/"3"), for static fixes; "auto" when unknown."""
    generations = run.keras if run is not None else []
    return str(max(generations)) if generations else "auto"


def at_finding(finding: RuntimeFinding, original: Path, text: str, policy: str | None,
               keras: str = "auto") -> list[Change]:
    """Candidates at one runtime finding's node; ``original`` is the user's file holding it,
    ``text`` its current text."""
    lines = text.splitlines()
    if not 0 < finding.line <= len(lines):
        return []
    anchor = lines[finding.line - 1].strip()
    out: list[Change] = []
    evidence = finding.text()
    notebook = original.suffix == ".ipynb"
    for static in [] if notebook else static_findings(text, original, policy, keras):
        if static.line == finding.line and static.fix is not None and str(static.fix.safety) != "none":
            out.append(Change(ChangeKind.STATIC, original, f"{static.code}'s fix: {static.fix.description}", evidence,
                              anchor=anchor, line=finding.line, codes=(static.code,), policy=policy, keras=keras))
    if finding.layer is None and finding.kind is not Kind.CONSTANT:
        indent = len(lines[finding.line - 1]) - len(lines[finding.line - 1].lstrip())
        if anchor.startswith("return"):
            # The value a `call` returns (`return exp(log_rate)`: a rate past 65504) cannot be cast back to
            # float16; left float32 it is what a float32 output layer gives the loss (a float16 layer after
            # it casts it as its input). Tried first: the island below would move the inf to its cast back.
            out.append(Change(ChangeKind.ISLAND, original, f"compute `{finding.op}`'s expression in float32 and "
                              "return it as float32", evidence, anchor=anchor, line=finding.line,
                              column=finding.column - indent, op=finding.op, extra={"output": True}))
        if finding.kind is Kind.NONFINITE and finding.op in DIVIDING:
            # A quotient past 65504 from finite operands (a divisor below 1: `scores / temperature`): cast back
            # as it is, it is inf again; grown like a product's island, the cast back follows the softmax.
            out.append(Change(ChangeKind.ISLAND, original, f"compute `{finding.op}`'s expression in float32 until "
                              "its values are back in range, and cast back", evidence, anchor=anchor,
                              line=finding.line, column=finding.column - indent, op=finding.op, extra={"grow": True}))
        out.append(Change(ChangeKind.ISLAND, original, f"compute `{finding.op}`'s expression in float32 and cast back",
                          evidence, anchor=anchor, line=finding.line, column=finding.column - indent, op=finding.op))
    out.extend(_layer_change(layer, evidence) for layer in _float32_layers(finding))
    return out


def _float32_layers(finding: RuntimeFinding) -> list[dict]:
    """The layer ``dtype="float32"`` goes on: the library layer that built the op, else the innermost layer
    whose call built it. An op a *model* built itself is its owner's (Keras 3's Functional casts a layer's
    float32 output to the next layer's float16 compute dtype as it calls that layer: the Cast is the model's by
    name, the next layer's by call), since a model's own dtype does not reach the layers inside it."""
    layer = finding.layer or finding.owner
    if finding.layer is not None and finding.layer.get("model") and finding.owner is not None:
        layer = finding.owner
    return [layer] if layer and layer.get("file") and layer.get("line") else []


def _layer_change(layer: dict, evidence: str, to_original=None) -> Change:
    path = Path(layer["file"]) if to_original is None else to_original(Path(layer["file"]))
    description = f"dtype=\"float32\" on layer `{layer.get('name')}` ({layer.get('class')})"
    extra = {}
    cell = layer.get("cell") or {}
    if cell.get("file") == layer["file"] and cell.get("line"):
        # A recurrent layer runs a cell the project built, whose own policy stays float16 under the RNN's dtype
        # (its loop then still overflows; tf_keras raises on the float32 state beside a float16 cell): both.
        description += f" and on its cell `{cell.get('name')}` ({cell.get('class')})"
        extra["cell"] = {"anchor": (cell.get("code") or "").strip(), "line": int(cell["line"]),
                         "class": cell.get("class")}
    return Change(ChangeKind.LAYER, path, description, evidence, anchor=(layer.get("code") or "").strip(),
                  line=int(layer["line"]), class_name=layer.get("class"), extra=extra)


def loss_scaling(verdict, run, files: list[Path]) -> list[Change]:
    """The loss-scaling rules' fixes for each file, then the fixed scale of the last resort."""
    policy = policy_of(run) or "mixed_float16"
    evidence = f"verdict {verdict.name}: {verdict.summary}"
    keras = keras_of(run)
    out = [Change(ChangeKind.LOSS_SCALING, f, "the loss-scaling rules' fixes (MP1xx)", evidence, codes=("MP1",),
                  policy=policy, keras=keras) for f in files]
    if _dynamic_misbehaves(verdict, run):
        out += [Change(ChangeKind.FIXED_SCALE, f, f"a fixed loss scale of {FIXED_SCALE:g} (last resort)", evidence,
                       codes=("MP1",), policy=policy, keras=keras, loss_scale=FIXED_SCALE) for f in files]
    return out


def _dynamic_misbehaves(verdict, run) -> bool:
    """A dynamic scale that collapsed or kept skipping (the stalled/at-risk trend), the
    only case for a fixed scale."""
    if run is None or not any(s.dynamic for s in run.steps):
        return False
    return verdict.name == "stalled" or verdict.evidence.get("kind") == SCALE_TREND


# Layers offered float32 for a stalled run (each costs one verified run).
STALLED_LAYERS = 2


def largest_layers(run) -> list[dict]:
    """The layers (not models) whose float16 ops reached the largest magnitudes, largest first."""
    from mpfix.verify.evidence import merge_ops

    out: list[dict] = []
    for entry in sorted(merge_ops(run.ops if run is not None else []), key=lambda e: -(e["peak"] or 0.0)):
        layer = run.layers.get(entry.get("layer") if entry.get("layer") is not None else entry.get("owner"))
        if layer and layer.get("file") and layer not in out:
            out.append(layer)
        if len(out) == STALLED_LAYERS:
            break
    return out


def output_layers(run) -> list[dict]:
    """The layers whose outputs are a model's outputs, built in the user's code."""
    return [layer for layer in ((run.layers or {}).values() if run is not None else ())
            if layer.get("output_of") and layer.get("file")]


def output_layer(run) -> dict | None:
    found = output_layers(run)
    return found[0] if found else None


def for_verdict(verdict, run, found: list[RuntimeFinding], texts, files: list[Path], to_original) -> list[Change]:
    """Every candidate for this round, best first. ``texts(path)`` gives the text of a
    file that ran; ``to_original(path)`` maps such a path to the user's file."""
    policy = policy_of(run)
    out: list[Change] = []
    # A value that entered the step non-finite (a tf.data batch) or a pipeline's cast has no expression of the step
    # to compute in float32: ``for_data`` offers the pipeline's edit.
    found = [f for f in found if not (f.extra.get("enters") or f.extra.get("data_cast"))]
    targets = [f for f in found if f.kind is Kind.NONFINITE] + [f for f in found if f.kind is Kind.CONSTANT]
    if verdict.name in ("at-risk", "diverged") or not targets:
        targets += [f for f in found if f.kind is Kind.HEADROOM]
    for finding in targets[:2]:
        original = to_original(Path(finding.file))
        # The file that ran (the working copy's, or the script made of a notebook's cells).
        text = texts(Path(finding.file))
        if text is None:
            continue
        local = RuntimeFinding(**{**finding.__dict__, "file": str(original)})
        place = notebook_place(finding.file, finding.line)
        for change in at_finding(local, original, text, policy, keras_of(run)):
            if place is not None and place[1]:  # a notebook's finding is shown at its cell and line
                change.evidence = f"{original.name}:cell {place[1]}:{place[2]}:{finding.column}: {finding.code} " \
                                  f"{finding.message}"
            if change.kind is ChangeKind.LAYER:
                change.path = to_original(change.path)
            out.append(change)
    if verdict.name == "non-finite" and any(f.kind is Kind.NONFINITE and f.layer is None and f.owner is None
                                            for f in targets[:2]):
        # An op no layer built, at a line of the user's that is not its expression (`model.fit(...)`: the op is
        # in the compiled loss): the loss of a float16 model output (wave 8's multi_output_k2: tf_keras casts
        # the ~2000 price targets to a float16 head's dtype and `mse` squares past 65504). Each output layer
        # made float32, one at a time: the run proves which.
        for layer in output_layers(run):
            out.append(_layer_change(layer, f"verdict non-finite: {verdict.summary}; `{layer.get('name')}` is an "
                                            "output of the model whose loss the op computes", to_original))
    if verdict.evidence.get("cause") == SCALED_CAUSE:
        # Gradients applied with their loss scale: the cause is the step, not an op of the forward pass.
        out[:0] = loss_scaling(verdict, run, files)
    elif verdict.name in ("underflow", "stalled") or verdict.evidence.get("kind") == SCALE_TREND:
        out += loss_scaling(verdict, run, files)
    if verdict.name == "stalled":
        # Gradients that overflow even as the scale falls come from the backward pass, which
        # the per-op evidence does not measure: the layers with the largest float16 values
        # of the forward pass are the likeliest to overflow there too.
        out += [_layer_change(layer, f"verdict stalled: {verdict.summary}; layer `{layer.get('name')}` holds "
                                     "the largest float16 values of the step", to_original)
                for layer in largest_layers(run)]
        # Or the loss: a float16 model output makes the compiled loss float16 on tf_keras, and its backward pass
        # overflows (held-out sisdr_separation_k2, turn 19: the SI-SDR loss's NaN fixed, every update still skipped).
        out += [_layer_change(layer, f"verdict stalled: {verdict.summary}; `{layer.get('name')}` is an output of the "
                                     "model whose loss the gradients start from", to_original)
                for layer in output_layers(run)]
    if verdict.name == "diverged":
        layer = output_layer(run)
        if layer is not None:
            change = _layer_change(layer, f"verdict diverged: {verdict.summary}")
            change.path = to_original(change.path)
            out.append(change)
    if verdict.name in DATA_VERDICTS:
        out += for_data(run, texts, to_original)
    unique, seen = [], set()
    for change in out:
        key = (change.kind, str(change.path), change.anchor, change.op, change.codes, change.loss_scale,
               change.extra.get("site"), change.extra.get("output"), change.extra.get("grow"))
        if key not in seen:
            seen.add(key)
            unique.append(change)
    return unique


# Verdicts a float16 cast of the input data can explain: inf past 65504, values near it, or the
# precision float16 loses on raw-unit targets.
DATA_VERDICTS = ("non-finite", "at-risk", "diverged")


def for_data(run, texts, to_original) -> list[Change]:
    """Each float16 cast of the script's input pipeline made a float32 cast, one site at a time."""
    out: list[Change] = []
    for cast in (run.data_casts if run is not None else []):
        ran = Path(cast["file"])
        text = texts(ran)
        original = to_original(ran)
        line = int(cast["line"])
        if text is None or original.suffix == ".ipynb" or not 0 < line <= len(text.splitlines()):
            continue
        found = data_casts.sites(text, line)
        nth = int(cast.get("nth", 0))
        order = ([nth] if nth < len(found) else []) + [i for i in range(len(found)) if i != nth]
        anchor = text.splitlines()[line - 1].strip()
        evidence = (f"{original.name}:{line}: the input pipeline casts {cast.get('source', 'its data')} data to "
                    f"float16 (`{cast.get('function') or 'map'}`), which no policy undoes")
        for site in order:
            out.append(Change(ChangeKind.DATA_CAST, original, f"`{found[site]}` keeps the data float32 (the model's "
                              "policy casts inputs itself)", evidence, anchor=anchor, line=line, op="Cast",
                              extra={"site": site}))
    return out


def crash_mix(verdict) -> mix_crash.Mix | None:
    """The float16/float32 mix a crashed verdict's error describes (None: another crash)."""
    if verdict.name != "crashed":
        return None
    return mix_crash.read(verdict.evidence.get("message") or "")


def for_crash(verdict, texts, to_original, files=()) -> list[Change]:
    """Casts at the expression whose float16/float32 mix crashed the run, best first; for a Keras 3 run that crashed
    summing a float16 layer loss with float32 ones, the changes at each layer with an activity regulariser."""
    if verdict.name == "crashed" and layer_losses.read(verdict.evidence.get("message") or ""):
        return for_layer_losses(verdict, texts, files)
    mix = crash_mix(verdict)
    frame = verdict.evidence.get("frame") or {}
    if mix is None or not frame.get("file") or not frame.get("line"):
        return []
    ran = Path(frame["file"])
    text = texts(ran)
    original = to_original(ran)
    if text is None or original.suffix == ".ipynb":
        return []
    line = int(frame["line"])
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return []
    anchor = lines[line - 1].strip()
    evidence = f"{original.name}:{line}: {verdict.summary}"
    out = []
    for index, site in enumerate(mix_crash.sites(text, line, mix)):
        up = Change(ChangeKind.CAST, original, f"`{site.float16}` cast to float32 where it meets `{site.float32}`",
                    evidence, anchor=anchor, line=line, op=mix.op,
                    extra={"float16_input": mix.float16_input, "elements": mix.elements, "site": index, "upcast": True})
        to = "the layer's compute dtype" if site.in_method else f"`{site.float16}`'s dtype"
        down = Change(ChangeKind.CAST, original, f"`{site.float32}` cast to {to} where it meets `{site.float16}`",
                      evidence, anchor=anchor, line=line, op=mix.op,
                      extra={"float16_input": mix.float16_input, "elements": mix.elements, "site": index,
                             "upcast": False})
        out += [down, up] if site.in_method else [up, down]
    return out


def for_missing_kernel(verdict, run, texts, to_original) -> list[Change]:
    """``dtype="float32"`` on the layer whose float16 op TensorFlow has no kernel for (``missing_kernel``)."""
    missing = missing_kernel.read(verdict.evidence.get("message")) if verdict.name == "crashed" else None
    if missing is None:
        return []
    evidence = f"{verdict.summary}: TensorFlow has no float16 kernel for `{missing.op}`"
    return [_layer_change(layer, evidence, to_original)
            for layer in missing_kernel.layers(missing, run, verdict.evidence.get("frame"), texts)]


def for_layer_losses(verdict, texts, files) -> list[Change]:
    """For each layer the user's ``files`` build with an activity regulariser (``layer_losses``): the regulariser
    function's returned value computed and returned in float32, then the layer in float32."""
    out: list[Change] = []
    evidence = f"{verdict.summary}: a float16 layer loss (`{layer_losses.read(verdict.evidence.get('message'))}`) " \
               "beside the float32 losses Keras 3 sums"
    for path in files:
        text = texts(path)
        if text is None or path.suffix == ".ipynb":
            continue
        lines = text.splitlines()
        for layer in layer_losses.regularised(text):
            if layer.returns is not None:
                out.append(Change(ChangeKind.ISLAND, path, f"the activity regulariser `{layer.function}` computed "
                                  "and returned in float32", evidence, anchor=lines[layer.returns - 1].strip(),
                                  line=layer.returns, extra={"returned": True}))
            out.append(Change(ChangeKind.LAYER, path, f"dtype=\"float32\" on the `{layer.class_name}` layer with "
                              "an activity regulariser", evidence, anchor=layer.anchor, line=layer.line,
                              class_name=layer.class_name))
    return out
