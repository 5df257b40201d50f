"""`verify --workers`: the group judged as one, on synthetic worker records (no TensorFlow);
the TF_CONFIG each worker gets."""

from __future__ import annotations

import json
import math
from pathlib import Path

from mpfix.verify.records import RunResult, Step
from mpfix.verify.verdict import judge
from mpfix.verify.workers import free_ports, tf_config
from mpfix.verify.workers_judge import explain, merge

SCRIPT = Path(__file__).parent / "scripts" / "workers" / "mwms.py"
STOPPED = {"event": "end", "status": "stopped"}


def worker(losses, end=STOPPED, crash=None, nonfinite=None):
    steps = [
        Step(i, loss, 32768.0, True, False, (nonfinite or {}).get(i, 0.0), 0.0, 1.0) for i, loss in enumerate(losses)
    ]
    return RunResult("mixed", steps=steps, end=dict(end), crash=crash, start={"pid": 1, "worker": 0})


def test_tf_config_is_tensorflows_documented_layout():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    config = json.loads(tf_config(ports, 2))
    assert config == {
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": 2},
    }


def test_worker_ports_are_outside_the_ephemeral_range_and_free():
    """The workers bind their ports only after TensorFlow's import; a port of the kernel's ephemeral range
    could meanwhile become the local end of an outgoing connection (their own, to one another) and
    the late worker's server would not start. Outside the range, free now, and not drawn from the
    seedable generator (two runs at once, seeded alike, drew the same)."""
    import random
    import socket

    from mpfix.verify import workers

    low, high = workers._ephemeral_range()
    random.seed(7)
    first = free_ports(3)
    random.seed(7)
    second = free_ports(3)
    assert first != second
    for ports in (first, second):
        assert len(set(ports)) == 3
        assert not [p for p in ports if low <= p <= high], (ports, low, high)
        for port in ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", port))


def test_worker_ports_fall_back_to_the_kernels_choice_when_nothing_outside_the_range_is_free(monkeypatch):
    from mpfix.verify import workers

    monkeypatch.setattr(workers, "_ephemeral_range", lambda: (1, 65535))
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(p > 0 for p in ports)


def test_a_nan_on_any_worker_is_the_groups_at_its_step_and_named():
    good = [1.0, 0.9, 0.8, 0.7, 0.6]
    runs = [worker(good), worker(good[:3] + [math.nan, 0.6])]
    group = merge("mixed", runs, [0, 1])
    assert [s.step for s in group.steps] == [0, 1, 2, 3, 4]
    assert math.isnan(group.steps[3].loss) and group.steps[3].nonfinite_where == [[1, 0]]
    assert group.steps[2].loss == 0.8  # the mean of finite losses
    v = explain(judge(group, None, SCRIPT), group, None, SCRIPT)
    assert v.name == "non-finite" and v.evidence["step"] == 3
    assert v.summary.endswith("on worker 1 replica 0")
    # Gradients non-finite on worker 0 only, loss finite everywhere, no dynamic scaler:
    runs = [worker(good, nonfinite={2: 0.5}), worker(good)]
    for step in runs[0].steps:
        step.dynamic = False
    v = explain(judge(merge("mixed", runs, [0, 1]), None, SCRIPT), merge("mixed", runs, [0, 1]), None, SCRIPT)
    assert v.name == "non-finite" and v.evidence["step"] == 2 and "worker 0 replica 0" in v.summary


def test_the_crash_that_caused_the_others_is_the_groups():
    """Worker 0 ended first with a peer's collective abort; worker 1's own error is the
    cause (it is not a derived error)."""
    aborted = {"type": "UnavailableError", "message": "Collective ops is aborted by: ...", "frames": []}
    own = {"type": "RuntimeError", "message": "worker 1 failed at step 2", "frames": [{"file": str(SCRIPT), "line": 80, "function": "<module>", "code": "raise"}]}
    runs = [worker([1.0, 0.9], end={"status": "crashed"}, crash=aborted), worker([1.0, 0.9], end={"status": "crashed"}, crash=own)]
    group = merge("mixed", runs, [0, 1])
    v = explain(judge(group, None, SCRIPT), group, None, SCRIPT)
    assert v.name == "crashed" and v.summary.startswith("worker 1: RuntimeError: worker 1 failed at step 2"), v.summary


def test_a_hang_names_each_workers_last_step_and_place():
    halted = {"status": "halted", "in_tensorflow": True, "user_frame": {"file": str(SCRIPT), "line": 85, "code": "loss = train_step()"}}
    sleeping = {"status": "halted", "in_tensorflow": False, "user_frame": {"file": str(SCRIPT), "line": 77, "code": "time.sleep(3600)"}}
    runs = [worker([1.0, 0.9, 0.8], end=halted), worker([1.0, 0.9], end=sleeping)]
    group = merge("mixed", runs, [0, 1])
    group.halted, group.timed_out = "hang: no worker recorded a step for 12 s", True
    v = explain(judge(group, None, SCRIPT), group, None, SCRIPT)
    assert v.name == "timeout" and v.evidence["kind"] == "hang"
    assert "worker 0: 3 steps (last step 2), halted, waiting inside TensorFlow" in v.summary
    assert "worker 1: 2 steps (last step 1), halted, in your code at mwms.py:77" in v.summary


def test_launcher_hint_names_the_worker_script_and_count():
    from mpfix.verify.workers_judge import launcher_hint

    config = tf_config([1111, 2222, 3333], 0)
    launches = [{"argv": ["/usr/bin/python3", "train worker.py", "--lr", "0.1"], "tf_config": config}] * 3
    hint = launcher_hint(launches)
    assert "started 3 process(es) with TF_CONFIG" in hint
    assert "`mpfix verify --workers 3 'train worker.py' -- --lr 0.1`" in hint
    assert launcher_hint([]) is None
    run = RunResult("mixed", end=dict(STOPPED, status="finished"), launches=launches)
    v = judge(run, None, SCRIPT)
    assert v.name == "no-steps" and v.summary == hint


def test_a_timeout_reports_each_workers_last_step():
    ends = [
        {"status": "timeout", "in_tensorflow": True, "user_frame": {"file": str(SCRIPT), "line": 85, "code": "train_step()"}},
        {"status": "timeout", "in_tensorflow": False, "user_frame": None},
    ]
    runs = [worker([1.0, 0.9, 0.8], end=ends[0]), worker([1.0, 0.9, 0.8, 0.7], end=ends[1])]
    for run in runs:
        run.timed_out = True
    group = merge("mixed", runs, [0, 1])
    v = explain(judge(group, None, SCRIPT), group, None, SCRIPT)
    assert v.name == "timeout" and v.evidence["kind"] == "timeout"
    assert v.summary.startswith("the workers did not finish within the timeout: worker 0: 3 steps (last step 2), timeout")
    assert "worker 1: 4 steps (last step 3), timeout" in v.summary and "non-finite" not in v.summary


def test_one_worker_of_a_cluster_is_refused_with_the_workers_command():
    """TF_CONFIG naming two workers and no --workers: verify would stop this worker at the
    step limit while its peer (started by hand) crashes; it refuses and says what to run."""
    import pytest

    from mpfix.verify.run import Options, VerifyError

    two = tf_config([1111, 2222], 0)
    with pytest.raises(VerifyError, match=r"cluster of 2 tasks.*mpfix verify --workers 2 SCRIPT"):
        Options.from_kwargs(env={"TF_CONFIG": two})
    assert Options.from_kwargs(env={"TF_CONFIG": two}, workers=2).workers == 2
    assert Options.from_kwargs(env={"TF_CONFIG": tf_config([1111], 0)}).workers == 1


def test_text_and_html_reports_show_one_line_per_worker_of_each_run():
    # Before, only --json had the workers (runs.mixed.workers): the text and HTML reports showed
    # the merged run and, at most, a note. Now each run (mixed and float32) lists its workers with
    # their own steps, end, loss, skipped steps and zero-gradient share.
    import html as html_module

    from mpfix.verify import report_html, report_text
    from mpfix.verify.run import Options, Report

    nan_steps = {3: 1.0}
    mixed_runs = [worker([1.0, 0.9, 0.8, 0.7, 0.6]), worker([1.2, 1.1, 1.0, 0.9, 0.8], nonfinite=nan_steps)]
    for step in mixed_runs[1].steps:
        step.skipped = step.step == 3
    mixed = merge("mixed", mixed_runs, [0, 1])
    halted = {"status": "halted", "in_tensorflow": False,
              "user_frame": {"file": str(SCRIPT), "line": 77, "code": "time.sleep(3600)"}}
    baseline = merge("float32", [worker([1.0, 0.9, 0.8]), worker([1.0, 0.9], end=halted)], [0, 1])
    report = Report(SCRIPT, [], Options(), mixed, baseline, explain(judge(mixed, baseline, SCRIPT), mixed, baseline, SCRIPT))
    text = report_text.render(report)
    lines = [line.strip() for line in text.splitlines()]
    assert "worker 0: 5 steps (last step 4), stopped  loss 1 -> 0.6  skipped 0  zero-grad 0.0%" in lines
    assert "worker 1: 5 steps (last step 4), stopped  loss 1.2 -> 0.8  skipped 1 (step 3)  zero-grad 0.0%" in lines
    # The float32 group's workers too, with where a halted one was.
    assert "worker 0: 3 steps (last step 2), stopped  loss 1 -> 0.8  skipped 0  zero-grad 0.0%" in lines
    assert ("worker 1: 2 steps (last step 1), halted, in your code at mwms.py:77: time.sleep(3600)"
            "  loss 1 -> 0.9  skipped 0  zero-grad 0.0%") in lines
    # Under their run: mixed's workers before the float32 line.
    assert text.index("worker 1: 5 steps") < text.index("  float32 ") < text.index("worker 1: 2 steps")
    page = html_module.unescape(report_html.render(report))
    for line in lines:
        if line.startswith("worker "):
            assert line in page
    # One process (no --workers): no worker line.
    single = Report(SCRIPT, [], Options(), mixed_runs[0], None, judge(mixed_runs[0], None, SCRIPT))
    assert "worker " not in report_text.render(single)
