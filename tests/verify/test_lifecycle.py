"""The child process's life: it never outlives mpfix (SIGTERM, SIGHUP, SIGKILL), keeps its
own deadline, reports the steps of a script that ends abruptly or hangs, and says why a
script ended without training (exit status, stderr, the user's frame). Real TensorFlow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify_helpers import SCRIPTS, verify_script
from mpfix.verify.run import VerifyError

pytestmark = pytest.mark.slow


def _processes_mentioning(text: str) -> list[str]:
    """``ps`` lines (pid, state, command) of live processes whose command line holds text."""
    # -ww: whole command lines (ps cuts them to the terminal's width otherwise).
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if text in line and "ps -eo" not in line and not line.split()[1].startswith("Z")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_no_process_outlives_a_signalled_verify(tmp_path, sig):
    """`mpfix verify hang.py` (import keras; while True: pass) is ended by a signal: no
    process of it remains (ps), and its temporary folder is gone. SIGKILL cannot be
    handled by mpfix: the child notices its parent is gone and ends itself."""
    env = dict(os.environ, TMPDIR=str(tmp_path), CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="3")
    mpfix = subprocess.Popen(
        [sys.executable, "-m", "mpfix", "verify", str(SCRIPTS / "hang.py"), "--no-baseline", "--device", "cpu"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        records = None
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("mpfix-verify-*/mixed.jsonl"))
            if found and '"start"' in found[0].read_text():
                records = found[0]
                break
            time.sleep(0.2)
        assert records is not None, "the child never started the script"
        time.sleep(0.5)  # the script is now spinning
        children = _processes_mentioning(str(tmp_path))
        assert any("mpfix.verify._bootstrap" in line for line in children), children
        mpfix.send_signal(sig)
        mpfix.wait(30)
        left = []
        deadline = time.monotonic() + 30  # a bound (the loop ends once they are gone): loaded CI
        while time.monotonic() < deadline:
            left = _processes_mentioning(str(tmp_path))
            if not left and not list(tmp_path.glob("mpfix-verify-*")):
                break
            time.sleep(0.2)
        assert left == [], "processes outlived mpfix:\n" + "\n".join(left)
        assert list(tmp_path.glob("mpfix-verify-*")) == []
        if sig == signal.SIGKILL:
            assert mpfix.returncode == -signal.SIGKILL
        else:
            assert mpfix.returncode == 128 + sig
            assert f"{sig.name}: the script's processes were stopped" in mpfix.stderr.read().decode()
    finally:
        if mpfix.poll() is None:
            mpfix.kill()
        for line in _processes_mentioning(str(tmp_path)):
            os.kill(int(line.split()[0]), signal.SIGKILL)


@pytest.mark.parametrize("code", [0, 5])
def test_os_exit_after_10_steps_keeps_the_10_steps(code):
    """os._exit(0) after 10 steps is judged on them; os._exit(5) is a failure (exit 14),
    never exit 0."""
    report = verify_script("abrupt.py", "--exit-after", "10", "--exit-code", str(code), steps=50, baseline=False)
    assert report.mixed.step_count == 10
    assert report.mixed.end["status"] == "exit" and report.mixed.end["abrupt"] is True
    if code == 0:
        assert report.verdict.name == "healthy", report.verdict.summary
    else:
        assert report.verdict.name == "crashed" and report.exit_code == 14, report.verdict.summary
        assert "exited with status 5 (os._exit) after 10 steps" in report.verdict.summary


def test_timeout_keeps_the_steps_and_does_not_start_the_baseline():
    """5 steps, then a hang: the child stops itself at the deadline after reading its last
    rows; the float32 run is not started after a timed-out mixed run (jobs=1)."""
    # 90 s: five steps must be measured before the deadline; on a loaded 2-core machine the
    # first step's tracing alone can take 12 s (CI runs two such tests at once).
    report = verify_script("abrupt.py", "--hang-after", "5", steps=50, jobs=1, timeout=90)
    v = report.verdict
    assert v.name == "timeout" and report.exit_code == 15
    assert report.mixed.step_count == 5 and v.evidence["steps"] == 5
    assert "5 steps measured" in v.summary
    assert report.mixed.end["status"] == "timeout"  # the child's own deadline, not a kill
    assert report.baseline is None
    assert "the float32 baseline was not run: the mixed run timed out" in v.notes  # once the timeout, not twice


def test_missing_required_argument_is_crashed_with_exit_status_and_stderr():
    report = verify_script("exits.py", baseline=False)
    v = report.verdict
    assert v.name == "crashed", v.summary
    assert v.evidence["exit_status"] == 2
    assert "status 2" in v.summary
    assert any("the following arguments are required: --data" in line for line in v.evidence["stderr_tail"])
    assert v.evidence["frame"]["file"].endswith("exits.py") and "parse_args" in v.evidence["frame"]["code"]


def test_sys_exit_3_is_crashed_with_its_status():
    report = verify_script("exits.py", "--data", "d", "--code", "3", baseline=False)
    v = report.verdict
    assert v.name == "crashed" and v.evidence["exit_status"] == 3, v.summary
    assert "no records in d" in v.summary  # the last stderr line
    assert "sys.exit(args.code)" in v.evidence["at"]


def test_child_killed_without_reporting_shows_signal_and_stderr():
    report = verify_script("exits.py", "--data", "d", "--die", baseline=False)
    v = report.verdict
    assert v.name == "crashed", v.summary
    assert "killed by SIGKILL" in v.summary
    assert "loader: cannot map /data/train.tfrecord" in v.summary


def test_error_while_tracing_a_tf_function_names_the_user_line():
    report = verify_script("graph_error.py", "--mode", "trace", baseline=False)
    v = report.verdict
    assert v.name == "crashed"
    assert "in user code" not in v.summary
    assert "Expected shape (None, 4)" in v.summary
    assert v.evidence["frame"]["file"].endswith("graph_error.py") and v.evidence["frame"]["line"] == 25
    assert v.evidence["frame"]["function"] == "train_step"


def test_error_running_a_graph_names_the_user_line():
    report = verify_script("graph_error.py", "--mode", "run", baseline=False)
    v = report.verdict
    assert v.name == "crashed"
    assert "Graph execution error" not in v.summary and "predictions out of range" in v.summary
    assert v.evidence["frame"]["file"].endswith("graph_error.py") and v.evidence["frame"]["line"] == 28


def test_interpreter_without_tensorflow_is_a_clear_usage_error(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    with pytest.raises(VerifyError) as info:
        verify_script("healthy_loop.py", python=str(python), baseline=False)
    message = str(info.value)
    assert "TensorFlow is not installed" in message and str(python) in message
    assert "--python" in message


def test_stdin_is_forwarded_to_both_runs(tmp_path):
    """`echo go | mpfix verify reads_stdin.py`: the mixed run and the float32 baseline both
    read "go" (a script that reads stdin crashed on /dev/null before)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="3")
    args = [sys.executable, "-m", "mpfix", "verify", str(SCRIPTS / "reads_stdin.py"), "--steps", "5", "--jobs", "2"]
    json_path = tmp_path / "r.json"
    done = subprocess.run([*args, "--json", str(json_path)], input=b"go\n", capture_output=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    import json

    data = json.loads(json_path.read_text())
    assert len(data["runs"]["mixed"]["steps"]) == 5 and len(data["runs"]["float32"]["steps"]) == 5
    # Without input the script says so: the verdict shows it (not a hang).
    done = subprocess.run(args, input=b"", capture_output=True, env=env, timeout=300)
    assert done.returncode == 14 and b"EOFError" in done.stdout, done.stdout.decode()
