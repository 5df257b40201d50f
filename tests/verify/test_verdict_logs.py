"""What a failed child leaves as text (no TensorFlow): a TensorFlow error with several root
errors, a non-zero exit after some steps, and `verify --help`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from mpfix.verify.cli import verify as verify_command
from mpfix.verify.logs import crash_head, root_errors
from mpfix.verify.records import RunResult, Step
from mpfix.verify.verdict import EXIT_CODES, judge

SCRIPT = Path(__file__).parent / "scripts" / "abrupt.py"

# TensorFlow 2.21's own message (MirroredStrategy over two logical CPUs, an assertion failing
# on both replicas inside a tf.function), stack text left out.
TWO_ROOTS = """Graph execution error:

Detected at node assert_less/Assert/AssertGuard/Assert defined at (most recent call last):

Detected at node assert_less/Assert/AssertGuard/Assert defined at (most recent call last):

2 root error(s) found.
  (0) INVALID_ARGUMENT:  assertion failed: [value out of range] [x (x:0) = ] [1]
\t [[{{node assert_less/Assert/AssertGuard/Assert}}]]
\t [[x/_2]]
  (1) INVALID_ARGUMENT:  shape mismatch on replica 1
\t [[{{node assert_less/Assert/AssertGuard/Assert}}]]
0 successful operations.
0 derived errors ignored. [Op:__inference_f_75]"""


def test_several_root_errors_are_reported_not_the_derived_count():
    assert root_errors(TWO_ROOTS) == [
        "INVALID_ARGUMENT: assertion failed: [value out of range] [x (x:0) = ] [1]",
        "INVALID_ARGUMENT: shape mismatch on replica 1",
    ]
    head = crash_head(TWO_ROOTS, "InvalidArgumentError")
    assert "derived errors" not in head
    assert head.startswith("INVALID_ARGUMENT: assertion failed: [value out of range]")
    assert "2 root errors" in head and "shape mismatch on replica 1" in head
    same = TWO_ROOTS.replace("shape mismatch on replica 1", "assertion failed: [value out of range] [x (x:0) = ] [1]")
    assert crash_head(same, "InvalidArgumentError").endswith("(2 root errors, all the same)")
    # One error, no root error list: unchanged.
    assert root_errors("Graph execution error:\n\nboom\n [[{{node a}}]]") == []


# Keras 3.15's message when a layer fails while the model is built (a concat of float16 and
# float32 in `AddCoords.call`, TF 2.21): the error itself comes after "Error encountered:".
KERAS3_BUILD = (
    'Exception encountered when calling AddCoords.call().\n'
    '\n'
    "\x1b[1mCould not automatically infer the output shape / dtype of 'add_coords' (of type AddCoo"
    'rds). Either the `AddCoords.call()` method is incorrect, or you need to implement the `Add'
    'Coords.compute_output_spec() / compute_output_shape()` method. Error encountered:\n'
    '\n'
    "Tensors in list passed to 'values' of 'ConcatV2' Op have types [float16, float32] that don"
    "'t all match.\x1b[0m\n"
    '\n'
    'Arguments received by AddCoords.call():\n'
    "  • args=('<KerasTensor shape=(None, 16, 16, 8), dtype=float16, sparse=False, ragged=False"
    ", name=keras_tensor_2>',)\n"
    "  • kwargs=<class 'inspect._empty'>"
)


def test_a_keras3_build_error_shows_the_error_itself():
    head = crash_head(KERAS3_BUILD, "TypeError")
    assert head == ("Exception encountered when calling AddCoords.call(). Tensors in list passed to 'values' of "
                    "'ConcatV2' Op have types [float16, float32] that don't all match.")


def test_crash_verdict_shows_the_root_error():
    run = RunResult("mixed", crash={"type": "InvalidArgumentError", "message": TWO_ROOTS, "frames": []}, end={"status": "crashed"})
    v = judge(run, None, SCRIPT)
    assert v.name == "crashed" and "0 derived errors" not in v.summary
    assert "value out of range" in v.summary


def _steps(n):
    return [Step(i, 1.0 - 0.01 * i, 1.0, False, False, 0.0, 0.0, 1.0) for i in range(n)]


def test_non_zero_exit_after_steps_is_a_failure_not_exit_0():
    run = RunResult("mixed", steps=_steps(10), end={"status": "exit", "code": 5, "abrupt": True, "frames": []})
    v = judge(run, None, SCRIPT)
    assert v.name == "crashed" and v.exit_code == EXIT_CODES["crashed"] != 0
    assert "exited with status 5 (os._exit) after 10 steps" in v.summary
    clean = RunResult("mixed", steps=_steps(10), end={"status": "exit", "code": 0, "abrupt": True, "frames": []})
    assert judge(clean, None, SCRIPT).name == "healthy"


def test_help_first_line_names_every_verdict():
    text = CliRunner().invoke(verify_command, ["--help"]).output
    first = " ".join(text.split("\n\n")[1].split())
    for name in EXIT_CODES:
        assert name in first, name


def test_files_both_runs_wrote_are_named(tmp_path):
    """The runs share the script's folder: a checkpoint both write is named, with which run's
    is left; a file only the mixed run wrote is not."""
    import os
    import time

    from mpfix.verify.outputs import Outputs

    (tmp_path / "data.csv").write_text("1,2\n")
    outputs = Outputs(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.keras").write_text("mixed")
    (tmp_path / "only_mixed.log").write_text("x")
    outputs.after("mixed")
    time.sleep(0.01)
    (tmp_path / "ckpt" / "model.keras").write_text("float32!")
    os.utime(tmp_path / "ckpt" / "model.keras")
    outputs.after("float32")
    notes = outputs.notes()
    assert len(notes) == 1 and "both runs wrote ckpt/model.keras" in notes[0], notes
    assert "only_mixed.log" not in notes[0] and "data.csv" not in notes[0]
    assert "float32 run's" in notes[0]
    quiet = Outputs(tmp_path)
    quiet.after("mixed")
    quiet.after("float32")
    assert quiet.notes() == []
