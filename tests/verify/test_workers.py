"""`mpfix verify --workers N`: real MultiWorkerMirroredStrategy workers on 127.0.0.1 (real
TensorFlow, no mocks), and MirroredStrategy's replicas read one by one. Each scenario starts
its workers once (module cache); after each, no process of the run is left (/proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify_helpers import SCRIPTS
from mpfix.verify.run import verify

pytestmark = pytest.mark.slow

MWMS = SCRIPTS / "workers" / "mwms.py"
MIRRORED = SCRIPTS / "workers" / "mirrored_replica_nan.py"
HANG_AFTER = 12.0
_CACHE: dict = {}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (zombies count as gone: they run nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _pids(report) -> list[int]:
    runs = [report.mixed] + ([report.baseline] if report.baseline is not None else [])
    return [w.start["pid"] for run in runs for w in (run.workers or [run]) if w.start and w.start.get("pid")]


def scenario(workers: int, *args: str, keras: int = 3, baseline: bool = False, steps: int = 5, script: Path = MWMS):
    key = (workers, args, keras, baseline, steps, script.name)
    if key not in _CACHE:
        env = {"TF_USE_LEGACY_KERAS": "1"} if keras == 2 else {}
        started = time.monotonic()
        report = verify(
            script, list(args), workers=workers, steps=steps, device="cpu", timeout=240,
            hang_after=HANG_AFTER, baseline=baseline, env=env,
        )
        _CACHE[key] = (report, time.monotonic() - started)
    report, elapsed = _CACHE[key]
    pids = _pids(report)
    assert pids and not [pid for pid in pids if _alive(pid)], "worker processes outlived verify"
    return report, elapsed


def test_healthy_3_workers_with_their_float32_baseline():
    report, _ = scenario(3, baseline=True)
    v = report.verdict
    assert v.name == "healthy" and report.exit_code == 0, v.summary
    assert len(report.mixed.workers) == 3 and len(report.baseline.workers) == 3
    # Stopped together at the same step boundary: no collective abort, no crash.
    for run in report.mixed.workers + report.baseline.workers:
        assert run.step_count == 5 and run.end["status"] == "stopped", run.end
    assert {w.start["worker"] for w in report.mixed.workers} == {0, 1, 2}
    assert "3 workers: worker 0: 5 steps" in " ".join(v.notes)


def test_text_and_html_reports_list_each_worker_of_each_run():
    import html

    from mpfix.verify import report_html, report_text

    report, _ = scenario(3, baseline=True)
    text = report_text.render(report)
    shown = [line.strip() for line in text.splitlines() if line.strip().startswith("worker ")]
    # Three workers under the mixed run, three under the float32 run, each with its own loss.
    assert len(shown) == 6, text
    for line in shown:
        assert line.startswith(("worker 0: 5 steps (last step 4), stopped  loss ", "worker 1: 5 steps (last step 4), stopped  loss ",
                                "worker 2: 5 steps (last step 4), stopped  loss ")), line
        assert "  skipped " in line and "  zero-grad " in line
    page = html.unescape(report_html.render(report))
    assert all(line in page for line in shown)


def test_nan_on_one_worker_keras2_is_non_finite_at_its_step_naming_the_worker():
    """tf_keras' LossScaleOptimizer all-reduces first, so every worker skips step 3 and
    training goes on; the NaN is worker 2's, at step 3."""
    report, _ = scenario(3, "--fault", "nan", "--worker", "2", "--at", "3", keras=2)
    v = report.verdict
    assert v.name == "non-finite" and v.evidence["step"] == 3, v.summary
    assert "on worker 2 replica 0" in v.summary and v.evidence["where"] == [[2, 0]]
    assert report.keras == 2
    assert [w.step_count for w in report.mixed.workers] == [5, 5, 5]


def test_nan_on_one_worker_keras3_hangs_and_is_reported_as_a_hang():
    """Keras 3's LossScaleOptimizer checks each worker's own gradients: worker 1 skips its
    update, worker 0 waits in the all-reduce for it. Reported, not silent."""
    report, _ = scenario(2, "--fault", "nan", "--worker", "1", "--at", "3")
    v = report.verdict
    assert v.name == "timeout" and v.evidence["kind"] == "hang", v.summary
    assert v.evidence["last_nonfinite"] == {"worker": 1, "step": 3, "in": "loss"}
    assert "worker 1 last saw a non-finite loss (step 3)" in v.summary
    # Worker 0's last step is the evidence; whether it is still waiting when the group is halted
    # or its collective already failed ("crashed") depends on load (seen in the full suite at load 7).
    assert "worker 0: 4 steps (last step 3)," in v.summary
    assert report.baseline is None  # a hang, found by --hang-after (kind "hang"), not the 240 s timeout


def test_keras3_fit_under_multi_worker_strategy_crashes_with_what_trains_instead():
    """Keras 3's `fit` gives a PerReplica batch to a conversion under MWMS (keras-team/keras#20585):
    a crash that is not float16's, so the verdict says what to use instead."""
    report, _ = scenario(2, script=SCRIPTS / "workers" / "keras3_fit.py")
    v = report.verdict
    assert v.name == "crashed" and "PerReplica" in v.summary, v.summary
    assert any(n.startswith("Keras 3's `fit` does not run under MultiWorkerMirroredStrategy") for n in v.notes), v.notes


def test_underflow_on_every_worker():
    report, _ = scenario(2, "--fault", "underflow", baseline=True, steps=6)
    assert report.verdict.name == "underflow", report.verdict.summary


def test_a_crashing_worker_gives_its_own_traceback():
    report, _ = scenario(3, "--fault", "crash", "--worker", "1", "--at", "2")
    v = report.verdict
    assert v.name == "crashed" and report.exit_code == 14, v.summary
    assert v.summary.startswith("worker 1: RuntimeError: worker 1 failed at step 2")
    assert v.evidence["worker"] == 1 and "mwms.py" in v.evidence["at"]
    others = [report.mixed.workers[i].end["status"] for i in (0, 2)]
    assert all(status in ("halted", "crashed") for status in others), others


def test_a_hanging_worker_is_found_in_its_own_code():
    report, _ = scenario(2, "--fault", "hang", "--worker", "0", "--at", "2")
    v = report.verdict
    assert v.name == "timeout" and v.evidence["kind"] == "hang", v.summary
    assert "worker 0: 2 steps (last step 1), halted, in your code at mwms.py" in v.summary
    assert "time.sleep(3600)" in v.summary
    assert "worker 1:" in v.summary and "waiting inside TensorFlow" in v.summary


@pytest.mark.parametrize("keras", [2, 3])
def test_loss_scale_optimizer_built_outside_the_strategy_scope(keras):
    """Both generations accept it for a custom loop here (the wrapped optimizer's variables
    are built under the scope at the first apply): measured like any run."""
    report, _ = scenario(2, "--lso", "outside", keras=keras)
    assert report.verdict.name == "healthy", report.verdict.summary
    assert report.keras == keras


@pytest.mark.parametrize("keras", [3, 2])
def test_mirrored_nan_on_replica_1_only_is_at_its_step(keras):
    """--steps ends on the NaN step: before, only replica 0 was read and verify said HEALTHY
    (or NaN one step late); every replica's row is read now."""
    env = {"TF_USE_LEGACY_KERAS": "1"} if keras == 2 else {}
    report = verify(MIRRORED, ["--at", "3"], steps=4, device="cpu", timeout=240, baseline=False, env=env)
    v = report.verdict
    assert v.name == "non-finite" and v.evidence["step"] == 3, v.summary
    assert "on replica 1" in v.summary and v.evidence["replicas"] == [1]
    assert report.keras == keras


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_no_worker_outlives_a_signalled_verify(tmp_path, sig):
    env = dict(os.environ, TMPDIR=str(tmp_path), CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "mpfix", "verify", "--workers", "2", "--no-baseline", str(MWMS)]
    mpfix = subprocess.Popen([*command, "--", "--fault", "hang", "--worker", "1", "--at", "1"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            records = list(tmp_path.glob("mpfix-verify-*/mixed-w*.jsonl"))
            if len(records) == 2 and all('"step"' in r.read_text() for r in records):
                break
            time.sleep(0.3)
        else:
            pytest.fail("the workers never made a step")
        pids = [int(line.split()[0]) for line in _bootstraps(tmp_path)]
        assert len(pids) == 2, pids
        mpfix.send_signal(sig)
        mpfix.wait(30)
        deadline = time.monotonic() + 60  # a bound (the loop ends once they are gone): a loaded 2-core CI
        while time.monotonic() < deadline and (any(_alive(p) for p in pids) or list(tmp_path.glob("mpfix-verify-*"))):
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)] and _bootstraps(tmp_path) == []
        assert list(tmp_path.glob("mpfix-verify-*")) == []
        assert mpfix.returncode == (-sig if sig == signal.SIGKILL else 128 + sig)
    finally:
        if mpfix.poll() is None:
            mpfix.kill()
        for line in _bootstraps(tmp_path):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def _bootstraps(folder: Path) -> list[str]:
    """'pid cmdline' of the live processes whose command line names ``folder`` (/proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and "_bootstrap" in cmdline and _alive(int(entry.name)):
            out.append(f"{entry.name} {cmdline}")
    return out


def test_a_worker_leaves_the_cluster_only_after_its_peers_ended():
    """Worker 1's last step ends 3 s after the step's last collective. Worker 0, done first,
    exits only once worker 1 wrote its end: a worker that leaves first can break a peer's
    last collective (its chunk still queued in gRPC; the coordination service's leader gone),
    and the peer that reached --steps ended `crashed` (the launcher test, once in CI)."""
    report, _ = scenario(2, "--fault", "slow", "--worker", "1", "--at", "2", steps=3)
    w0, w1 = report.mixed.workers
    assert [w.end["status"] for w in (w0, w1)] == ["stopped", "stopped"], (w0.end, w1.end)
    assert w0.left["peers"] == {"1": "ended"} and w0.left["time"] >= w1.end["time"], (w0.left, w1.end)
    assert w1.left["peers"] == {"0": "ended"}


def test_a_launcher_scripts_workers_are_followed():
    """A script that starts its workers itself (Popen with TF_CONFIG): each worker runs under
    the bootstrap (sitecustomize + exec, same pid), all stop together at --steps, and the
    group is judged as one; float32 too. Keras 2: the NaN on worker 1 at its step."""
    report = verify(
        SCRIPTS / "workers" / "launcher.py", ["--steps", "100", "--", "--fault", "nan", "--worker", "1"],
        steps=5, device="cpu", timeout=240, env={"TF_USE_LEGACY_KERAS": "1"},
    )
    v = report.verdict
    assert v.name == "non-finite" and v.evidence["step"] == 3 and "on worker 1 replica 0" in v.summary, v.summary
    assert [w.step_count for w in report.mixed.workers] == [5, 5]
    assert [w.step_count for w in report.baseline.workers] == [5, 5]
    ends = [(run.mode, i, w.end) for run in (report.mixed, report.baseline) for i, w in enumerate(run.workers)]
    assert all(end["status"] == "stopped" for _, _, end in ends), ends
    # Each left the cluster after its peer ended (_peers.py).
    assert all(w.left and set(w.left["peers"].values()) == {"ended"} for run in (report.mixed, report.baseline) for w in run.workers)
    assert report.mixed.launches and report.keras == 2
    pids = [w.start["pid"] for run in (report.mixed, report.baseline) for w in run.workers]
    assert len(pids) == 4 and not [p for p in pids if _alive(p)]


def test_a_launcher_scripts_chief_and_worker_keep_their_own_records():
    """A cluster with a ``chief`` task: the chief and worker 0 both have ``task.index`` 0, and were
    both followed as worker 0, into one records file. Numbered as TensorFlow numbers them (chief 0,
    then the workers), each has its own records and waits for the other (_peers.cluster_rank)."""
    report = verify(SCRIPTS / "workers" / "launcher.py", ["--chief", "--steps", "100"],
                    steps=4, device="cpu", timeout=240, baseline=False)
    assert report.verdict.name == "healthy", report.verdict.summary
    workers = report.mixed.workers
    assert [w.step_count for w in workers] == [4, 4]
    pids = [w.start["pid"] for w in workers]
    assert len(set(pids)) == 2 and not [p for p in pids if _alive(p)]
    assert all(w.end["status"] == "stopped" for w in workers), [w.end for w in workers]
    assert all(w.left and list(w.left["peers"].values()) == ["ended"] for w in workers), [w.left for w in workers]


def test_a_launcher_scripts_crashing_worker_halts_its_peers():
    report = verify(
        SCRIPTS / "workers" / "launcher.py", ["--steps", "100", "--", "--fault", "crash", "--worker", "1", "--at", "2"],
        steps=5, device="cpu", timeout=240, baseline=False,
    )
    v = report.verdict
    assert v.name == "crashed" and v.summary.startswith("worker 1: RuntimeError: worker 1 failed at step 2"), v.summary
    pids = [w.start["pid"] for w in report.mixed.workers]
    assert len(pids) == 2 and not [p for p in pids if _alive(p)]
