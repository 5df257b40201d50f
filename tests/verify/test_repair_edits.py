"""The source edits and evidence plumbing of ``mpfix repair`` (no TensorFlow: fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpfix.verify import islands
from mpfix.verify.changes import Change, ChangeKind, find_line
from mpfix.verify.evidence import Kind, findings, op_column
from mpfix.verify.records import parse_run


def _compiles(text: str) -> None:
    compile(text, "<fixed>", "exec")


def test_island_around_an_overflowing_matmul_reaches_the_softmax_and_casts_back_to_the_layer_dtype():
    text = (
        "import tensorflow as tf\n"
        "class A:\n"
        "    def call(self, q, k):\n"
        "        w = tf.nn.softmax(tf.matmul(q, k, transpose_b=True), axis=-1)\n"
        "        return w\n"
    )
    col, _ = op_column(text.splitlines()[3], "BatchMatMulV2")
    out = islands.float32_island(text, 4, col, "BatchMatMulV2")
    assert out.splitlines()[3].strip() == (
        "w = tf.cast(tf.nn.softmax(tf.matmul(tf.cast(q, tf.float32), tf.cast(k, tf.float32), transpose_b=True), "
        "axis=-1), self.compute_dtype)"
    )
    _compiles(out)


def test_island_of_a_long_sum_grows_to_the_division_and_casts_back_to_the_operand_dtype():
    text = "import tensorflow as tf\ndef pool(h):\n    return tf.reduce_sum(h, axis=1) / 4096.0\n"
    out = islands.float32_island(text, 3, 12, "Sum")
    assert "tf.cast(tf.reduce_sum(tf.cast(h, tf.float32), axis=1) / 4096.0, h.dtype)" in out


def test_island_of_a_log_keeps_its_node_and_casts_the_producer_operand_in_a_backend_agnostic_module():
    # keras.ops module without TensorFlow: the island is written with keras.ops, and the
    # softmax that produced the underflowed probabilities is inside it.
    text = "import keras\nfrom keras import ops\ndef nll(p, y):\n    return -ops.mean(y * ops.log(ops.softmax(p)))\n"
    line = text.splitlines()[3]
    col, _ = op_column(line, "Log")
    out = islands.float32_island(text, 4, col, "Log")
    assert 'ops.cast(ops.log(ops.softmax(ops.cast(p, "float32"))), p.dtype)' in out
    assert "tf." not in out


def test_an_island_returned_by_call_may_stay_float32_as_the_models_output():
    text = ("from keras import layers, ops\nclass Rate(layers.Layer):\n    def call(self, x):\n"
            "        return ops.exp(self.log_rate(x))\n    def other(self, x):\n        return ops.exp(x)\n")
    col, _ = op_column(text.splitlines()[3], "Exp")
    assert "        return ops.exp(ops.cast(self.log_rate(x), \"float32\"))\n" in \
        islands.float32_island(text, 4, col, "Exp", output=True)
    # The default island casts back; only a `call`'s returned value may stay float32.
    assert "self.compute_dtype" in islands.float32_island(text, 4, col, "Exp")
    col, _ = op_column(text.splitlines()[5], "Exp")
    assert islands.float32_island(text, 6, col, "Exp", output=True) is None
    # Back in range (a softmax, a division) or not an overflow: only the usual island, cast back.
    for returned, op in (("tf.nn.softmax(tf.exp(x))", "Exp"), ("tf.reduce_sum(x, 1) / 64.0", "Sum"),
                         ("tf.math.log(x)", "Log")):
        text = f"class L(Layer):\n    def call(self, x):\n        return {returned}\n"
        col, _ = op_column(text.splitlines()[2], op)
        assert islands.float32_island(text, 3, col, op, output=True) is None
        assert islands.float32_island(text, 3, col, op) is not None


@pytest.mark.parametrize("imports, cast", [
    # The names the imports bind, not the text: `from keras import layers, ops` (wave 6's poisson_counts_k3.py
    # island was written with an unbound `tf` and rejected by the validation).
    ("import keras\nfrom keras import layers, ops\n", 'ops.cast(ops.exp(ops.cast(h, "float32")), h.dtype)'),
    ("from keras import ops as K\n", 'K.cast(ops.exp(K.cast(h, "float32")), h.dtype)'),
    ("import keras as k\n", 'k.ops.cast(ops.exp(k.ops.cast(h, "float32")), h.dtype)'),
    ("import tensorflow as tf2\nfrom keras import ops\n", "tf2.cast(ops.exp(tf2.cast(h, tf2.float32)), h.dtype)"),
])
def test_island_casts_are_spelled_with_the_names_the_modules_imports_bind(imports, cast):
    text = f"{imports}def rate(h):\n    return ops.exp(h)\n"
    line = len(imports.splitlines()) + 2
    col, _ = op_column(text.splitlines()[line - 1], "Exp")
    assert cast in islands.float32_island(text, line, col, "Exp")


@pytest.mark.parametrize("cast, spelled", [
    ("tf.cast({}, tf.float32)", "tf.cast(tf.reduce_mean(tf.exp(tf.cast(feats, tf.float32) * 5.0)), tf.float32)"),
    ("tf.cast({}, dtype=\"float32\")",
     'tf.cast(tf.reduce_mean(tf.exp(tf.cast(feats, tf.float32) * 5.0)), dtype="float32")'),
])
def test_island_of_an_exp_stops_at_the_users_own_cast_to_float32_with_no_cast_back(cast, spelled):
    # Growing past the cast found no operand to cast (the whole cast was one): no change was
    # written and repair ended with only the static fixes tried.
    expr = cast.format("tf.reduce_mean(tf.exp(feats * 5.0))")
    text = f"import tensorflow as tf\ndef energy(feats):\n    reg = {expr}\n    return reg\n"
    col, _ = op_column(text.splitlines()[2], "Exp")
    out = islands.float32_island(text, 3, col, "Exp")
    assert out is not None and out.splitlines()[2].strip() == f"reg = {spelled}"
    _compiles(out)


def test_island_of_an_exp_in_a_cast_to_float16_still_casts_back():
    text = "import tensorflow as tf\ndef f(h):\n    return tf.cast(tf.exp(h) / 2.0, tf.float16)\n"
    col, _ = op_column(text.splitlines()[2], "Exp")
    out = islands.float32_island(text, 3, col, "Exp")
    assert "tf.cast(tf.exp(tf.cast(h, tf.float32)) / 2.0, h.dtype)" in out


def test_island_leaves_keyword_and_literal_arguments_alone():
    text = "import tensorflow as tf\ndef f(h, n):\n    e = tf.reduce_mean(tf.pow(h, 2), axis=n)\n"
    col, _ = op_column(text.splitlines()[2], "Pow")
    out = islands.float32_island(text, 3, col, "Pow")
    assert "tf.pow(tf.cast(h, tf.float32), 2)" in out and "axis=n" in out


def test_island_casts_only_the_tensor_arguments_the_op_table_names_not_a_positional_axis():
    # ops table: reduce_sum's result follows its first argument only (dtype_args); `axis` is an int.
    text = "import tensorflow as tf\ndef pool(h, axis):\n    return tf.reduce_sum(tf.exp(h), axis) / 8.0\n"
    col, _ = op_column(text.splitlines()[2], "Exp")
    out = islands.float32_island(text, 3, col, "Exp")
    assert "tf.reduce_sum(tf.exp(tf.cast(h, tf.float32)), axis) / 8.0" in out
    assert "tf.cast(axis" not in out
    _compiles(out)


def test_island_of_an_overflow_ends_at_an_op_the_table_calls_bounded():
    # tanh is in [-1, 1] whatever its input (ops.Kind.BOUNDED): float16 holds it again, so the cast back is there.
    text = "import tensorflow as tf\nclass A:\n    def call(self, x):\n        return tf.tanh(tf.exp(x)) * 2.0\n"
    col, _ = op_column(text.splitlines()[3], "Exp")
    out = islands.float32_island(text, 4, col, "Exp")
    assert "tf.cast(tf.tanh(tf.exp(tf.cast(x, tf.float32))), self.compute_dtype) * 2.0" in out
    _compiles(out)


def test_island_returns_none_when_the_node_is_not_there():
    assert islands.float32_island("x = 1\n", 1, 1, "Exp") is None
    assert islands.float32_island("def f(:\n", 1, 1, "Exp") is None


@pytest.mark.parametrize("src, expected", [
    ("x = Dense(3)\n", 'x = Dense(3, dtype="float32")\n'),
    ("x = Dense(3, dtype='float16')\n", 'x = Dense(3, dtype="float32")\n'),
    ("x = Dense(3, **kw)\n", 'x = Dense(3, dtype="float32", **kw)\n'),
    ("h = Attention(4)(x)\n", 'h = Attention(4, dtype="float32")(x)\n'),
])
def test_layer_float32(src, expected):
    name = "Attention" if "Attention" in src else "Dense"
    assert islands.layer_float32(src, 1, name) == expected


def test_layer_float32_names_the_class_or_changes_nothing():
    assert islands.layer_float32("x = Dense(3, dtype='float32')\n", 1, "Dense") is None
    # The layer's class is not built on that line: never another constructor.
    assert islands.layer_float32("inputs = Input((3,))\n", 1, "Dense") is None


def test_change_is_anchored_on_its_line_text_not_its_number():
    text = "import tensorflow as tf\ndef f(x):\n    return tf.exp(x) / 2.0\n"
    change = Change(ChangeKind.ISLAND, Path("m.py"), "island", "e", anchor="return tf.exp(x) / 2.0", line=3,
                    column=8, op="Exp")
    moved = "import tensorflow as tf\n\n\n# moved down\ndef f(x):\n    return tf.exp(x) / 2.0\n"
    assert find_line(moved, change.anchor, 3) == 6
    out = change.apply(moved)
    assert "tf.cast(tf.exp(tf.cast(x, tf.float32)) / 2.0, x.dtype)" in out
    assert change.apply("x = 1\n") is None


def test_runtime_findings_from_child_events(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\n\ndef f(q, k):\n    s = tf.nn.softmax(tf.matmul(q, k))\n"
                      "x = tf.constant(-1e9)\n", encoding="utf-8")
    events = [
        {"event": "layer", "index": 0, "name": "dense", "class": "Dense", "file": str(script), "line": 5,
         "code": "x = tf.constant(-1e9)"},
        {"event": "op", "trace": 0, "order": 3, "type": "BatchMatMulV2", "name": "MatMul", "file": str(script),
         "line": 4, "peak": 0.0, "peak_step": -1, "first_bad": 2, "born": True},
        {"event": "op", "trace": 0, "order": 4, "type": "Softmax", "name": "Softmax", "file": str(script),
         "line": 4, "peak": 0.0, "peak_step": -1, "first_bad": 2, "born": False},
        {"event": "op", "trace": 0, "order": 1, "type": "MatMul", "name": "dense/MatMul", "file": str(script),
         "line": 9, "layer": 0, "peak": 20000.0, "peak_step": 1, "first_bad": -1, "born": False},
        {"event": "f16-const", "type": "Cast", "name": "Cast", "became": "-inf", "original": -1e9,
         "file": str(script), "line": 5},
    ]
    run = parse_run("mixed", json.loads(json.dumps(events)))
    found = findings(run)
    kinds = [f.kind for f in found]
    assert kinds == [Kind.NONFINITE, Kind.CONSTANT, Kind.HEADROOM]
    first, const, headroom = found
    assert (first.line, first.column, first.code) == (4, 23, "MP901")
    assert "from finite inputs at step 2" in first.message
    assert const.code == "MP903" and "-1e+09 became -inf" in const.message
    # Built by a library layer: reported at the layer's construction line.
    assert headroom.line == 5 and headroom.layer["name"] == "dense" and headroom.code == "MP902"
    # A static rule's code where one applies.
    again = findings(run, {(str(script), 5): "MP201"})
    assert [f.code for f in again] == ["MP901", "MP201", "MP201"]
    assert first.text(tmp_path) == "train.py:4:23: MP901 " + first.message


def test_a_change_goes_into_the_notebook_cell_holding_its_line(tmp_path):
    from mpfix.verify import repair_notebooks
    from mpfix.verify.repair import problem

    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# title\n"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": ["%matplotlib inline\n", "import tensorflow as tf\n"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": ["def f(x):\n", "    return tf.exp(x) / 2.0"]},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    text = json.dumps(notebook, indent=1) + "\n"
    path = tmp_path / "n.ipynb"
    change = Change(ChangeKind.ISLAND, path, "island", "e", anchor="return tf.exp(x) / 2.0", line=40, column=8,
                    op="Exp")
    out = change.apply(text)
    cells = json.loads(out)["cells"]
    assert cells[2]["source"] == ["def f(x):\n", "    return tf.cast(tf.exp(tf.cast(x, tf.float32)) / 2.0, x.dtype)"]
    assert cells[:2] == notebook["cells"][:2]
    assert out.startswith('{\n "cells"') and out.endswith("}\n")  # the notebook's own indent and final newline
    assert problem(path, text, out) is None  # the magic line is masked, the cells compile
    broken = out.replace("x.dtype)", "x.dtype")
    assert problem(path, text, broken) is not None
    # Static fixes are not applied to notebooks here.
    assert Change(ChangeKind.STATIC, path, "s", "e", codes=("MP",)).apply(text) is None
    assert repair_notebooks.apply("not json", lambda s: s + "x") is None



def test_runtime_findings_as_sarif(tmp_path):
    from mpfix.verify import report_sarif
    from mpfix.verify.evidence import RuntimeFinding

    found = [
        RuntimeFinding("MP901", "float16 `BatchMatMulV2` gave inf/NaN", str(tmp_path / "a.py"), 25, 33,
                       Kind.NONFINITE, "BatchMatMulV2", step=0, end_column=66),
        RuntimeFinding("MP204", "float16 `Exp` reached 9000", str(tmp_path / "a.py"), 3, 5, Kind.HEADROOM, "Exp",
                       step=4, peak=9000.0),
    ]
    log = json.loads(report_sarif.render(found))
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["MP204", "MP901"]
    assert run["tool"]["driver"]["rules"][0]["helpUri"].endswith("#mp204")
    first = run["results"][0]
    assert first["ruleId"] == "MP901" and run["tool"]["driver"]["rules"][first["ruleIndex"]]["id"] == "MP901"
    assert first["locations"][0]["physicalLocation"]["region"] == {"startLine": 25, "startColumn": 33, "endLine": 25,
                                                                   "endColumn": 66}
    assert first["properties"]["runtime"] is True and run["results"][1]["properties"]["peak"] == 9000.0


def test_a_nan_moved_downstream_is_progress_only_when_its_origin_is_fixed():
    from mpfix.verify.evidence import moved_downstream

    def run(*ops):
        return parse_run("mixed", [{"event": "op", "trace": 0, "order": order, "type": "MatMul", "name": name,
                                    "file": "a.py", "line": 1, "peak": 0.0, "peak_step": -1, "first_bad": bad,
                                    "born": born} for name, order, bad, born in ops])

    before = run(("dense/MatMul", 1, 0, True), ("norm/Cast", 5, 0, False))
    after = run(("dense/MatMul", 1, -1, False), ("norm/Cast", 5, 0, True))
    assert moved_downstream(before, after)
    # The same op still creates the NaN: no progress.
    assert not moved_downstream(before, run(("dense/MatMul", 1, 0, True), ("norm/Cast", 5, 0, False)))
    # The new origin fails at an earlier step: no progress either.
    assert not moved_downstream(run(("dense/MatMul", 1, -1, False), ("norm/Cast", 5, 3, True)),
                                run(("dense/MatMul", 1, 0, True), ("norm/Cast", 5, -1, False)))
    # No per-op evidence (an eager script): no claim.
    assert not moved_downstream(run(), after)


def test_repair_reports_text_json_html(tmp_path, monkeypatch):
    from mpfix.verify import report_repair
    from mpfix.verify.records import RunResult, Step
    from mpfix.verify.repair import Outcome, RepairResult, Trial
    from mpfix.verify.verdict import Verdict

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["mpfix", "repair", "a.py"])
    script = tmp_path / "a.py"

    def run(losses):
        return RunResult("mixed", steps=[Step(i, x, 1.0, False, False, 0.0, 0.0, 1.0) for i, x in enumerate(losses)])

    island = Change(ChangeKind.ISLAND, script, "compute `Exp`'s expression in float32", "a.py:3:12: MP204 ...",
                    verdict="healthy")
    layer = Change(ChangeKind.LAYER, script, 'dtype="float32" on layer `dense` (Dense)', "a.py:9:5: MP902 ...")
    result = RepairResult(script, Outcome(Verdict("non-finite", "nan at step 0"), run([float("nan")])),
                          Outcome(Verdict("healthy", "all finite"), run([1.0, 0.5])), run([1.0, 0.49]),
                          changes=[island], trials=[Trial(layer, "non-finite", False, "the verdict did not improve"),
                                                    Trial(island, "healthy", True, "verdict improved")],
                          texts={script: ("x = tf.exp(h)\n", "x = tf.cast(tf.exp(tf.cast(h, tf.float32)), h.dtype)\n")})
    text = report_repair.render(result)
    assert text.startswith("--- a/a.py\n+++ b/a.py\n")
    assert "a.py: non-finite -> healthy (exit 0)" in text
    assert "final loss: mixed n/a -> 0.5, float32 0.49" in text
    assert "float32 island: compute `Exp`'s expression in float32 -> healthy" in text
    assert "evidence: a.py:3:12: MP204 ..." in text
    assert 'float32 layer: dtype="float32" on layer `dense` (Dense): non-finite (the verdict did not improve)' in text
    report_repair.write_json(result, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["exit_code"] == 0 and data["verdict"]["after"]["name"] == "healthy"
    assert [t["kept"] for t in data["trials"]] == [False, True] and data["command"] == "mpfix repair a.py"
    assert data["runs"]["mixed_before"]["final_loss"] is None and data["runs"]["float32"]["final_loss"] == 0.49
    report_repair.write_html(result, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "non-finite &rarr; healthy" in page and "tf.cast(tf.exp(tf.cast(h, tf.float32)), h.dtype)" in page
    assert 'aria-label="loss"' in page and "mixed, after" in page


def test_a_change_is_kept_only_when_the_loss_agrees_and_float32_is_unchanged():
    from mpfix.verify.records import RunResult, Step
    from mpfix.verify.repair_checks import agrees as _agrees
    from mpfix.verify.repair_checks import same_float32 as _same_float32

    def run(losses, mode="mixed"):
        return RunResult(mode, end={"event": "end", "status": "finished"}, returncode=0,
                         steps=[Step(i, x, 1.0, False, False, 0.0, 0.0, 1.0) for i, x in enumerate(losses)])

    float32 = run([1.0 - 0.02 * i for i in range(30)], "float32")
    assert _agrees(run([1.0 - 0.02 * i + 1e-4 * (-1) ** i for i in range(30)]), float32)
    assert not _agrees(run([1.0 - 0.01 * i for i in range(30)]), float32)  # ends far from float32 (diverged)
    assert not _agrees(run([1.0] * 29 + [float("nan")]), float32)  # non-finite
    # 9 of 10 updates skipped (stalled at a loss of 2e7, wave 8's accum_class_k2): learns nothing, though
    # `diverged` finds no pair of losses after the same number of applied updates.
    short = run([1.5 - 0.03 * i for i in range(10)], "float32")
    stalled = run([2.139e7 + 4e4 * i for i in range(10)])
    for s in stalled.steps[1:]:
        s.skipped = True
    assert not _agrees(stalled, short)
    assert _same_float32(run([1.0 - 0.02 * i for i in range(30)], "float32"), float32)
    assert not _same_float32(run([1.0 - 0.02 * i for i in range(20)], "float32"), float32)  # fewer steps
    assert not _same_float32(run([1.0 + 0.05 * i for i in range(30)], "float32"), float32)  # float32 changed


def test_a_stalled_run_offers_float32_for_the_layers_with_the_largest_float16_values(tmp_path):
    from mpfix.verify.candidates import for_verdict
    from mpfix.verify.verdict import Verdict

    script = tmp_path / "t.py"
    script.write_text("a = Dense(8)\nb = Dense(1)\nc = Pool()\n")
    events = [{"event": "layer", "index": i, "name": n, "class": c, "file": str(script), "line": i + 1, "code": code}
              for i, (n, c, code) in enumerate([("dense", "Dense", "a = Dense(8)"), ("dense_1", "Dense", "b = Dense(1)"),
                                                 ("pool", "Pool", "c = Pool()")])]
    events += [{"event": "op", "trace": 0, "order": k, "type": "MatMul", "name": f"op{k}", "file": str(script),
                "line": 9, "layer": layer, "peak": peak, "peak_step": 0, "first_bad": -1, "born": False}
               for k, (layer, peak) in enumerate([(1, 30.0), (0, 900.0), (2, 5.0), (0, 1000.0)])]
    run = parse_run("mixed", events)
    offered = for_verdict(Verdict("stalled", "all steps skipped"), run, findings(run), lambda p: None, [], lambda p: p)
    layers = [c for c in offered if c.kind is ChangeKind.LAYER]
    assert [c.class_name for c in layers] == ["Dense", "Dense"]
    assert [c.anchor for c in layers] == ["a = Dense(8)", "b = Dense(1)"]  # largest values first, two at most
    assert layers[0].apply(script.read_text()).splitlines()[0] == 'a = Dense(8, dtype="float32")'


def test_a_stalled_run_offers_float32_for_its_output_layers_after_the_largest_ones(tmp_path):
    """Held-out sisdr_separation_k2 (turn 19): the SI-SDR loss's NaN fixed, every update was still skipped; the
    float16 head, whose output the compiled loss differentiates, was never offered (only the largest layers)."""
    from mpfix.verify.candidates import for_verdict
    from mpfix.verify.verdict import Verdict

    script = tmp_path / "t.py"
    script.write_text("a = Conv(8)\nhead = ConvT(1)\n")
    events = [{"event": "layer", "index": 0, "name": "conv", "class": "Conv", "file": str(script), "line": 1,
               "code": "a = Conv(8)"},
              {"event": "layer", "index": 1, "name": "head", "class": "ConvT", "file": str(script), "line": 2,
               "code": "head = ConvT(1)", "output_of": "model"},
              {"event": "op", "trace": 0, "order": 0, "type": "Conv2D", "name": "op0", "file": str(script), "line": 9,
               "layer": 0, "peak": 900.0, "peak_step": 0, "first_bad": -1, "born": False}]
    run = parse_run("mixed", events)
    offered = for_verdict(Verdict("stalled", "all steps skipped"), run, findings(run), lambda p: None, [], lambda p: p)
    assert [c.anchor for c in offered if c.kind is ChangeKind.LAYER] == ["a = Conv(8)", "head = ConvT(1)"]


def test_loss_scaling_candidates_and_the_fixed_scale_only_for_a_misbehaving_dynamic_scale(tmp_path):
    from mpfix.verify.candidates import for_verdict
    from mpfix.verify.records import RunResult, Step
    from mpfix.verify.verdict import Verdict

    script = tmp_path / "t.py"

    def run(dynamic):
        return RunResult("mixed", end={"policies": {"keras3": "mixed_float16"}, "keras": [3]},
                         steps=[Step(i, 1.0, 2.0 ** (15 - i), dynamic, dynamic, 0.0, 0.0, 1.0) for i in range(10)])

    def kinds(verdict, r):
        return [(c.kind, c.policy, c.keras, c.loss_scale) for c in for_verdict(verdict, r, [], lambda p: None,
                                                                               [script], lambda p: p)]

    underflow = Verdict("underflow", "zeros")
    assert kinds(underflow, run(False)) == [(ChangeKind.LOSS_SCALING, "mixed_float16", "3", None)]
    trend = Verdict("at-risk", "the loss scale keeps falling", {"kind": "loss-scale"})
    assert kinds(trend, run(True))[-1] == (ChangeKind.FIXED_SCALE, "mixed_float16", "3", 1024.0)
    # No dynamic scale (nothing misbehaved): no fixed scale.
    assert ChangeKind.FIXED_SCALE not in [k for k, *_ in kinds(Verdict("stalled", "s"), run(False))]


def test_a_round_with_no_writable_change_says_where_the_user_must_fix_it(tmp_path):
    from mpfix.verify.evidence import RuntimeFinding
    from mpfix.verify.repair import _nothing_to_try

    found = [RuntimeFinding("MP204", "float16 `Exp` gave inf/NaN", str(tmp_path / "loop.py"), 15, 34,
                            Kind.NONFINITE, "Exp", step=0)]
    note = _nothing_to_try(found)
    assert "loop.py:15:34 (`Exp`)" in note and "by hand" in note


ATTENTION = (
    "import tensorflow as tf\n"
    "class A(tf.keras.layers.Layer):\n"
    "    def call(self, q, k, v):\n"
    "        scores = tf.matmul(q, k, transpose_b=True)\n"
    "{between}"
    "        weights = tf.nn.softmax(scores, axis=-1)\n"
    "        return tf.matmul(weights, v){after}\n"
)


def _attention_island(between: str = "", after: str = "") -> str | None:
    text = ATTENTION.format(between=between, after=after)
    col, _ = op_column(text.splitlines()[3], "BatchMatMulV2")
    return islands.float32_island(text, 4, col, "BatchMatMulV2")


def test_island_of_scores_reaches_the_softmax_of_the_next_statement():
    # Cast back right after the matmul, the scores were inf again (repair kept a useless island,
    # then needed dtype="float32" on the whole layer).
    out = _attention_island(between="        k = k\n")
    lines = out.splitlines()
    assert lines[3].strip() == "scores = tf.matmul(tf.cast(q, tf.float32), tf.cast(k, tf.float32), transpose_b=True)"
    assert lines[5].strip() == "weights = tf.cast(tf.nn.softmax(scores, axis=-1), self.compute_dtype)"
    _compiles(out)


def test_island_of_scores_read_twice_stays_in_its_own_statement():
    out = _attention_island(after=" + scores")
    lines = out.splitlines()
    assert lines[3].strip() == ("scores = tf.cast(tf.matmul(tf.cast(q, tf.float32), tf.cast(k, tf.float32), "
                                "transpose_b=True), self.compute_dtype)")
    assert lines[4].strip() == "weights = tf.nn.softmax(scores, axis=-1)"


def test_island_of_scores_read_in_a_branch_stays_in_its_own_statement():
    text = ATTENTION.format(between="", after="").replace(
        "        weights = tf.nn.softmax(scores, axis=-1)\n",
        "        if self.causal:\n            weights = tf.nn.softmax(scores, axis=-1)\n")
    col, _ = op_column(text.splitlines()[3], "BatchMatMulV2")
    out = islands.float32_island(text, 4, col, "BatchMatMulV2")
    assert "self.compute_dtype)" in out.splitlines()[3]
    assert "weights = tf.nn.softmax(scores, axis=-1)" in out


def test_island_needs_no_cast_back_when_the_next_statement_casts_the_value_to_float32():
    text = ("import tensorflow as tf\ndef energy_loss(y, pred, feats):\n"
            "    reg = tf.reduce_mean(tf.exp(feats * 5.0))\n"
            "    return tf.reduce_mean(tf.square(y - pred)) + 1e-6 * tf.cast(reg, tf.float32)\n")
    col, _ = op_column(text.splitlines()[2], "Exp")
    out = islands.float32_island(text, 3, col, "Exp")
    assert out.splitlines()[2] == "    reg = tf.reduce_mean(tf.exp(tf.cast(feats, tf.float32) * 5.0))"
    assert out.splitlines()[3] == text.splitlines()[3]


def test_a_crash_round_with_no_writable_cast_names_the_crash_line():
    from types import SimpleNamespace

    from mpfix.verify.repair import _nothing_to_try

    verdict = SimpleNamespace(name="crashed", evidence={"frame": {"file": "/w/train.py", "line": 12}})
    note = _nothing_to_try([], verdict)
    assert note.startswith("no cast could be written at train.py:12") and "by hand" in note
    assert "--locate" in _nothing_to_try([], SimpleNamespace(name="non-finite", evidence={}))


def test_the_runtime_op_tables_are_read_from_the_one_table_of_ops():
    from mpfix.codemods.facts import ops
    from mpfix.verify import evidence, mix_crash

    # Every graph op type names ops the table lists (adding one is a line in ops.GRAPH_OPS).
    assert all(ops.graph_specs(graph_op) for graph_op in ops.GRAPH_OPS)
    # Classes decide: expm1 is in the exp family (MP204's subject, an overflow the island reaches past), a division
    # is no overflow, a contraction is.
    assert evidence.op_rules()["Expm1"] == "MP204" and evidence.op_rules()["SquaredDifference"] == "MP203"
    assert {"Expm1", "BatchMatMulV2", "Sum"} <= islands.OVERFLOWING and "RealDiv" not in islands.OVERFLOWING
    assert set(evidence.op_names()["BatchMatMulV2"]) == {"matmul", "dot", "einsum", "@"}
    # A mix crash's two tensors are the first two positional arguments: never einsum's equation.
    assert mix_crash.SPELLINGS["MatMul"] == ("@", frozenset({"matmul", "dot"}))
    assert mix_crash.LIST_OPS == {"ConcatV2": frozenset({"concat"}), "Pack": frozenset({"stack"})}
