"""Parent side: the per-op float16 evidence of a run as findings, in the shape of static ones.

The child (``_evidence.py``) reports, for the float16 ops of the traced training step,
each op's largest ``|value|``, the first step its output was non-finite and whether its
inputs were still finite then (``born``), plus the constants that became inf or 0 in
float16. Here they become ``RuntimeFinding``s at ``path:line:col``:

* a static rule's code where one covers the op (``op_rules``; the static finding mpfix
  reports on that very line wins), else a runtime code (``RUNTIME_CODES``: MP901 an op whose
  finite inputs gave a non-finite output, MP902 an op past 1/8 of 65504, MP903 a constant
  that became inf or 0);
* the column is the op's expression on that line (``op_names``: ``Exp`` is a call of
  ``exp``, ``BatchMatMulV2`` one of ``matmul`` or ``@``...), else the line's first column.

An op built inside a library layer (``Dense``) is reported at the line that built the layer.
"""

from __future__ import annotations

import ast
import enum
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

FLOAT16_MAX = 65504.0
# The at-risk verdict's fraction of float16's range (verdict.HEADROOM_FRACTION, 1/8).
HEADROOM = FLOAT16_MAX / 8

# Runtime codes, for what no static rule covers (docs/verify.md "Runtime findings").
RUNTIME_CODES = {
    "MP901": "float16 op whose finite inputs gave an inf/NaN output",
    "MP902": "float16 op output past 1/8 of 65504 (three doublings from overflow)",
    "MP903": "constant that became inf or 0 in float16",
    "MP904": "Keras metric NaN/Inf under mixed precision while float32's is finite",
}


@functools.cache
def op_rules() -> dict[str, str]:
    """The static rule whose subject an op type is, by its class in the one table of ops: exponentials and powers
    are MP204's, squares and sums of squares MP203's. (Read on first use: the table's package imports LibCST, which
    verify's reports never need.)"""
    from mpfix.codemods.facts import ops

    of_kind = {ops.Kind.EXP: "MP204", ops.Kind.POW: "MP204", ops.Kind.SQUARE: "MP203", ops.Kind.SQUARED_SUM: "MP203"}
    return {graph_op: rule for graph_op in ops.GRAPH_OPS for spec in ops.graph_specs(graph_op)
            for kind, rule in of_kind.items() if spec.has(kind)}


@functools.cache
def op_names() -> dict[str, tuple[str, ...]]:
    """Python spellings of an op type on a source line: the table's call names, and the operators that build it."""
    from mpfix.codemods.facts import ops

    return {graph_op: names + tuple(o for o, built in ops.OPERATOR_OPS.items() if graph_op in built)
            for graph_op, names in ops.GRAPH_OPS.items()}


_OPERATORS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.MatMult: "@",
}


class Kind(str, enum.Enum):
    NONFINITE = "non-finite"  # finite inputs, non-finite output
    HEADROOM = "headroom"  # finite, but past HEADROOM
    CONSTANT = "constant"  # a constant that became inf or 0 in float16
    METRIC = "metric"  # a Keras metric non-finite under mixed precision only (metric_judge.py)

    def __str__(self) -> str:
        return self.value


@dataclass
class RuntimeFinding:
    """One op (or constant) of the user's project, judged from a run."""

    code: str
    message: str
    file: str
    line: int
    column: int
    kind: Kind
    op: str
    step: int | None = None
    peak: float | None = None
    layer: dict | None = None
    # The innermost layer (not a model) whose call built the op, project layers included:
    # where ``dtype="float32"`` would go.
    owner: dict | None = None
    end_column: int | None = None
    source: str = ""
    extra: dict = field(default_factory=dict)

    def text(self, root: Path | None = None) -> str:
        from mpfix.verify.frames import notebook_place

        if self.extra.get("cell"):
            return f"{_display(self.file, root)}:cell {self.extra['cell']}:{self.line}:{self.column}: {self.code} " \
                   f"{self.message}"
        place = notebook_place(self.file, self.line)
        if place is not None and place[1]:
            notebook, cell, line = place
            return f"{_display(str(notebook), root)}:cell {cell}:{line}:{self.column}: {self.code} {self.message}"
        return f"{_display(self.file, root)}:{self.line}:{self.column}: {self.code} {self.message}"

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "message": self.message,
            "filename": self.file,
            "location": {"row": self.line, "column": self.column},
            "end_location": {"row": self.line, "column": self.end_column or self.column},
            "kind": str(self.kind),
            "op": self.op,
            "step": self.step,
            "peak": None if self.peak is None or not math.isfinite(self.peak) else self.peak,
            "layer": (self.layer or {}).get("name"),
            "cell": self.extra.get("cell"),
            "runtime": True,
        }

    def finding(self):
        """The same as an ``mpfix.findings.Finding`` (no fix), for the static output formats."""
        from mpfix.findings import Finding, Position

        return Finding(self.code, self.message, self.file, Position(self.line, self.column),
                       Position(self.line, self.end_column or self.column))


def _display(path: str, root: Path | None) -> str:
    import os

    try:
        return os.path.relpath(path, root or Path.cwd())
    except ValueError:
        return path


def op_column(source_line: str, op_type: str) -> tuple[int, int] | None:
    """1-based (start, end) columns of the expression of ``op_type`` on ``source_line``."""
    names = op_names().get(op_type, ())
    if not names:
        return None
    text = source_line.strip()
    indent = len(source_line) - len(source_line.lstrip())
    tree, adjust = None, 0
    # A line alone may not parse: a block opener (`with ...:`) or part of a bracketed call.
    for candidate, shift in ((text, 0), (text + "\n    pass", 0), (f"({text})", -1)):
        try:
            tree, adjust = ast.parse(candidate), shift
            break
        except SyntaxError:
            continue
        except (ValueError, RecursionError, MemoryError):  # a NUL, or nested deeper than this stack allows
            return None
    if tree is None:
        return None
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        elif isinstance(node, ast.BinOp):
            name = _OPERATORS.get(type(node.op))
        if name in names and node.lineno == 1 and getattr(node, "end_lineno", 1) == 1:
            found.append((node.col_offset, node.end_col_offset))
    if not found:
        return None
    start, end = min(found)  # the leftmost (outermost) spelling
    return start + adjust + indent + 1, end + adjust + indent + 1


def _where(entry: dict, layers: dict) -> tuple[str | None, int | None, dict | None]:
    """(file, line, layer) an op is reported at: its layer's construction line when a
    library layer built it, else the project line that created it."""
    layer = layers.get(entry.get("layer")) if entry.get("layer") is not None else None
    if layer and layer.get("file") and layer.get("line"):
        return layer["file"], int(layer["line"]), layer
    return entry.get("file"), entry.get("line"), None


def _code_for(op: str, file: str, line: int, kind: Kind, static: dict | None) -> str:
    if static is not None:
        code = static.get((file, line))
        if code:
            return code
    if kind is Kind.CONSTANT:
        return "MP903"
    return op_rules().get(op) or ("MP901" if kind is Kind.NONFINITE else "MP902")


def _line_text(file: str, line: int) -> str:
    import linecache

    linecache.checkcache(file)  # repair rewrites files between runs
    return linecache.getline(file, line)


def findings(run, static: dict | None = None) -> list[RuntimeFinding]:
    """Runtime findings of one run (the mixed run), worst first: ops that created a NaN/Inf,
    constants, then ops past the headroom threshold. ``static`` maps (file, line) to the
    code of the static finding there."""
    if run is None:
        return []
    out: list[RuntimeFinding] = []
    seen: set = set()
    merged = merge_ops(run.ops)
    for entry in sorted(merged, key=lambda e: (e["first_bad"] if e["first_bad"] >= 0 else math.inf, e["order"])):
        file, line, layer = _where(entry, run.layers)
        if not file or not line:
            continue
        if entry["first_bad"] >= 0 and entry.get("enters"):
            # Read from a resource (the next batch of a tf.data iterator): made before the step, not by the op.
            kind = Kind.NONFINITE
            message = f"float16 `{entry['type']}` brought inf/NaN into the step at step {entry['first_bad']}"
        elif entry["first_bad"] >= 0 and entry["born"]:
            kind = Kind.NONFINITE
            message = (f"float16 `{entry['type']}` gave inf/NaN from finite inputs at step {entry['first_bad']}")
        elif entry["first_bad"] < 0 and entry["peak"] >= HEADROOM:
            kind = Kind.HEADROOM
            message = (f"float16 `{entry['type']}` reached {entry['peak']:.6g} ({entry['peak'] / FLOAT16_MAX:.0%} of "
                       f"65504) at step {entry['peak_step']}")
        else:
            continue
        key = (file, line, entry["type"], kind)
        if key in seen:
            continue
        seen.add(key)
        if layer is not None:
            message += f", inside layer `{layer.get('name')}` ({layer.get('class')}) built here"
        out.append(_finding(kind, entry["type"], file, line, message, static, layer,
                            step=entry["first_bad"] if kind is Kind.NONFINITE else entry["peak_step"],
                            peak=entry["peak"], owner=run.layers.get(entry.get("owner"))))
        if entry.get("enters") and kind is Kind.NONFINITE:
            out[-1].extra["enters"] = True
    for const in run.constants:
        file, line, layer = _where(const, run.layers)
        if not file or not line:
            continue
        key = (file, line, "const", const.get("became"))
        if key in seen:
            continue
        seen.add(key)
        before = const.get("original")
        what = f"{before:g}" if isinstance(before, (int, float)) else "a constant"
        message = f"{what} became {const.get('became')} in float16 (op `{const.get('type')}`)"
        out.append(_finding(Kind.CONSTANT, "Cast" if const.get("type") == "Cast" else "Const", file, line, message,
                            static, layer, owner=run.layers.get(const.get("owner"))))
    out += _pipeline_findings(run, out, static)
    order = {Kind.NONFINITE: 0, Kind.CONSTANT: 1, Kind.HEADROOM: 2}
    return sorted(out, key=lambda f: (order[f.kind], f.step if f.step is not None else 0, not f.extra.get("data_cast")))


def _pipeline_findings(run, found: list, static: dict | None) -> list[RuntimeFinding]:
    """A non-finite run no float16 op of whose step made the first inf/NaN (none measured was born non-finite; the
    next batch may have brought it), beside an input pipeline that casts its data to float16 itself (``data_casts``:
    a ``tf.data`` map's ops are outside the step, unmeasured): each such cast, as where float16 begins (turn 17's
    pipeline_energy: a window's energy summed past 65504 in the map; Keras 3 named no line, tf_keras only its
    iterator at ``fit``'s). Marked ``data_cast``: repair's edit for them is ``data_casts``', not an island."""
    casts = getattr(run, "data_casts", None) or []
    if not casts or any(f.kind is Kind.NONFINITE and not f.extra.get("enters") for f in found):
        return []
    bad = [s.step for s in run.steps if not s.loss_finite or s.nonfinite_fraction > 0]
    if not bad:
        return []
    out, seen = [], set()
    for cast in casts:
        file, line = cast.get("file"), cast.get("line")
        if not file or not line or (file, line) in seen:
            continue
        seen.add((file, line))
        message = (f"the input pipeline casts {cast.get('source', 'its')} data to float16 here "
                   f"(`{cast.get('function') or 'map'}`) and no float16 op of the step made its first inf/NaN "
                   f"(step {min(bad)}): the map's float16 ops, which the step does not measure, are the likely source")
        finding = _finding(Kind.NONFINITE, "Cast", file, int(line), message, static, None, step=min(bad))
        finding.extra["data_cast"] = True
        out.append(finding)
    return out


def _finding(kind, op, file, line, message, static, layer, step=None, peak=None, owner=None) -> RuntimeFinding:
    source = _line_text(file, line)
    span = None if layer is not None else op_column(source, op)
    first = len(source) - len(source.lstrip()) + 1
    column, end = span if span else (first, len(source.rstrip()) + 1)
    return RuntimeFinding(_code_for(op, file, line, kind, static), message, file, line, column, kind, op,
                          step=step, peak=peak, layer=layer, owner=owner, end_column=end, source=source.rstrip("\n"))


def merge_ops(ops: list[dict]) -> list[dict]:
    """One entry per op name across traces (a step traced twice): the largest peak, the
    earliest non-finite step."""
    merged: dict[tuple, dict] = {}
    for op in ops:
        key = (op.get("name"), op.get("file"), op.get("line"))
        entry = merged.get(key)
        peak = op.get("peak") or 0.0
        bad = op.get("first_bad", -1)
        if entry is None:
            merged[key] = dict(op, peak=peak, first_bad=bad, born=bool(op.get("born")))
            continue
        if peak > entry["peak"]:
            entry["peak"], entry["peak_step"] = peak, op.get("peak_step")
        if bad >= 0 and (entry["first_bad"] < 0 or bad < entry["first_bad"]):
            entry["first_bad"], entry["born"] = bad, bool(op.get("born"))
    return list(merged.values())


def origin_op(run) -> dict | None:
    """The op that created the run's first NaN/Inf (name, type, first_bad), if measured."""
    born = [e for e in merge_ops(run.ops) if e["first_bad"] >= 0 and e["born"]] if run is not None else []
    return min(born, key=lambda e: (e["first_bad"], e.get("trace", 0), e["order"])) if born else None


def moved_downstream(before, after) -> bool:
    """The op that created ``before``'s first NaN/Inf no longer does in ``after``, where
    another op does, at the same step or later: a change that fixed one overflow and
    uncovered the next (a float32 Dense whose output then overflows the float16 layer
    after it)."""
    old, new = origin_op(before), origin_op(after)
    if old is None or new is None or new["name"] == old["name"]:
        return False
    if any(e["name"] == old["name"] and e["first_bad"] >= 0 for e in merge_ops(after.ops)):
        return False
    # Neither op orders (they count float16 ops, which the change alters) nor names (a
    # float32 layer's float16 neighbour gets a new Cast under an old name) identify "later"
    # across the two runs: the step does. Progress that leads nowhere is dropped at the end.
    return new["first_bad"] >= old["first_bad"]


def first_nonfinite(found: list[RuntimeFinding]) -> RuntimeFinding | None:
    """The op that created the run's first NaN/Inf, if the evidence has it."""
    return next((f for f in found if f.kind is Kind.NONFINITE), None)


def static_codes(paths) -> dict:
    """(file, line) -> code of the first static finding of mpfix on that line."""
    try:
        from mpfix.api import check_paths

        found = check_paths([Path(p) for p in paths])
    except Exception:  # a static-analysis failure must not hide the runtime findings
        return {}
    out: dict = {}
    for f in found:
        out.setdefault((str(Path(f.filename).resolve()), f.line), f.code)
    return out


def for_report(report) -> list[RuntimeFinding]:
    """The runtime findings of ``report``'s mixed run (computed once, kept on the report)."""
    cached = getattr(report, "_runtime_findings", None)
    if cached is not None:
        return cached
    found = findings(report.mixed)
    if found:
        static = static_codes(sorted({f.file for f in found}))
        if static:
            found = findings(report.mixed, static)
    report._runtime_findings = found
    return found
