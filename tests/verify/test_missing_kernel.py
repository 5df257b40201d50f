"""A crash on an op TensorFlow has no float16 kernel for (turn 19: held-out glow_flow_k3's ``tf.linalg.slogdet`` of a
float16 kernel). ``repair`` said "nothing to repair: the script's verdict is crashed"; it now puts the layer that ran
the op in float32, and when that moves the crash to where the layer's float32 output meets float16, casts there."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from verify_helpers import SCRIPTS, repair_copy

from mpfix.verify import missing_kernel
from mpfix.verify.candidates import for_missing_kernel
from mpfix.verify.changes import ChangeKind
from mpfix.verify.records import RunResult
from mpfix.verify.repair_progress import Outcome, kernel_crash_moved
from mpfix.verify.verdict import Verdict

# TF 2.21 on CPU, as the runs printed them (a traced `fit` step; an eager call).
GRAPH = ("No OpKernel was registered to support Op 'LogMatrixDeterminant' used by {{node StatefulPartitionedCall/"
         "flow_1/invertible_dense_1/LogMatrixDeterminant}} with these attrs: [T=DT_HALF]\nRegistered devices: [CPU]")
EAGER = ("Could not find device for node: {{node LogMatrixDeterminant}} = LogMatrixDeterminant[T=DT_HALF]\n"
         "All kernels registered for op LogMatrixDeterminant:\n  device='CPU'; T in [DT_FLOAT]")
MIX = "Input 'y' of 'AddV2' Op has type float16 that does not match type float32 of argument 'x'."
FLOAT32_ONLY = GRAPH.replace("T=DT_HALF", "T=DT_BFLOAT16")

FLOW = textwrap.dedent("""\
    import tensorflow as tf
    import keras


    class InvertibleDense(keras.layers.Layer):
        def call(self, x):
            _, logdet = tf.linalg.slogdet(self.w)
            return tf.matmul(x, self.w), logdet
    """)


def _run(*layers: dict) -> RunResult:
    run = RunResult("mixed")
    run.layers = dict(enumerate(layers))
    return run


def _layer(name: str, cls: str = "InvertibleDense", line: int = 20, **more) -> dict:
    return {"name": name, "class": cls, "file": "/w/flow.py", "line": line, "code": f"m = {cls}()", **more}


def test_the_op_and_the_layers_name_scopes_are_read_from_both_forms():
    assert missing_kernel.read(GRAPH) == missing_kernel.MissingKernel(
        "LogMatrixDeterminant", ("invertible_dense_1", "flow_1", "StatefulPartitionedCall"))
    assert missing_kernel.read(EAGER) == missing_kernel.MissingKernel("LogMatrixDeterminant", ())
    assert missing_kernel.read(MIX) is None and missing_kernel.read(FLOAT32_ONLY) is None
    assert missing_kernel.read(None) is None


def test_the_layer_is_the_innermost_scope_the_run_built_or_its_name_made_unique():
    model = _layer("flow", "Flow", 30, model=True)
    found = missing_kernel.read(GRAPH)
    # The only layer `invertible_dense` ran under the scope `invertible_dense_1`; the model is not a candidate.
    assert missing_kernel.layers(found, _run(model, _layer("invertible_dense")), None, lambda p: None) == \
        [_layer("invertible_dense")]
    four = [_layer("invertible_dense" + (f"_{k}" if k else "")) for k in range(4)]
    assert missing_kernel.layers(found, _run(model, *four), None, lambda p: None) == [four[1]]
    assert missing_kernel.layers(found, _run(model, _layer("dense", "Dense")), None, lambda p: None) == []


def test_eagerly_the_layer_is_the_one_whose_class_holds_the_crash_line():
    run = _run(_layer("dense", "Dense", 12), _layer("invertible_dense", line=14))
    texts = {Path("/w/flow.py"): FLOW}.get
    found = missing_kernel.read(EAGER)
    assert missing_kernel.layers(found, run, {"file": "/w/flow.py", "line": 7}, texts) == [run.layers[1]]
    assert missing_kernel.layers(found, run, {"file": "/w/flow.py", "line": 1}, texts) == []  # not in a class


def test_the_candidate_is_the_layer_in_float32():
    crashed = Verdict("crashed", "InvalidArgumentError: ...", {"message": GRAPH})
    (change,) = for_missing_kernel(crashed, _run(_layer("invertible_dense")), lambda p: None, lambda p: p)
    assert change.kind is ChangeKind.LAYER and change.line == 20 and "LogMatrixDeterminant" in change.evidence
    assert for_missing_kernel(Verdict("crashed", "x", {"message": MIX}), _run(_layer("invertible_dense")),
                              lambda p: None, lambda p: p) == []


def _crashed(message: str) -> Outcome:
    return Outcome(Verdict("crashed", "crashed", {"message": message}), RunResult("mixed"))


def test_a_kernel_crash_that_became_a_dtype_mix_crash_is_progress_only():
    assert kernel_crash_moved(_crashed(GRAPH), _crashed(MIX))
    assert not kernel_crash_moved(_crashed(GRAPH), _crashed(GRAPH))  # the same crash
    assert not kernel_crash_moved(_crashed(GRAPH), _crashed("ValueError: shapes do not match"))  # not castable
    assert not kernel_crash_moved(_crashed(MIX), _crashed(MIX))  # there was no kernel crash
    assert not kernel_crash_moved(_crashed(GRAPH), Outcome(Verdict("healthy", "ok"), RunResult("mixed")))


@pytest.mark.slow
def test_repair_puts_the_layer_whose_op_has_no_float16_kernel_in_float32(tmp_path):
    run = repair_copy(tmp_path, SCRIPTS / "repair" / "slogdet_flow.py")
    assert run.result.returncode == 0 and "slogdet_flow.py: crashed -> healthy" in run.result.stdout, \
        run.result.stdout + run.result.stderr
    assert [(c["kind"], c["line"]) for c in run.report["changes"]] == [("float32 layer", 42)], run.report["changes"]
    assert run.after == run.before.replace("self.mix = InvertibleDense()", 'self.mix = InvertibleDense(dtype="float32")')
