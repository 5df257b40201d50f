"""Every sample through the user's path: check → apply --unsafe-fixes (on a copy) → verify.

Each sample reproduces one failure; the test asserts what ``mpfix check`` finds,
that ``apply`` leaves nothing to find, and the ``mpfix verify`` verdict before
and after the fix. The verify runs (one TensorFlow child each) run in parallel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from mpfix.verify.verdict import EXIT_CODES

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
VERDICTS = {code: name for name, code in EXIT_CODES.items()}


@dataclass(frozen=True)
class Expected:
    codes: frozenset[str]  # rule codes `mpfix check` reports
    before: str  # verify verdict of the sample as it is
    after: str  # ... and after `mpfix apply --unsafe-fixes`
    steps: int  # optimizer steps verify measures (the failure shows within them)


EXPECTED = {
    # ~99% of gradient entries exactly 0 without loss scaling.
    "k3_no_loss_scaling.py": Expected(frozenset({"MP101"}), "underflow", "healthy", 20),
    # Updates multiplied by 32768: the loss explodes, then every step is skipped.
    "k2_half_done_scaling.py": Expected(frozenset({"MP103"}), "stalled", "healthy", 10),
    # AttributeError on mixed_precision.experimental before the first step.
    "tf24_era_training.py": Expected(frozenset({"MP301", "MP302", "MP303", "MP306", "MP307"}), "crashed", "healthy", 10),
    # -1e9 → -inf in float16, 0 * -inf = NaN at step 0.
    "attention_mask_1e9.py": Expected(frozenset({"MP201"}), "non-finite", "healthy", 10),
    # 1e-8 → 0 in float16, rsqrt(0) * 0 = NaN on padding rows at step 0.
    "epsilon_normalisation.py": Expected(frozenset({"MP202"}), "non-finite", "healthy", 10),
    # sum of squares of 128 x 256 activations > 65504 → inf at step 0.
    "l2_loss_activations.py": Expected(frozenset({"MP203"}), "non-finite", "healthy", 10),
    # predictions pass 65504 in the float16 head (inf near step 66).
    "float16_regression_head.py": Expected(frozenset({"MP205"}), "non-finite", "healthy", 100),
    "healthy_training.py": Expected(frozenset(), "healthy", "healthy", 20),
}


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_USE_LEGACY_KERAS", None)  # each sample chooses its Keras by its imports
    return env


def _mpfix(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _verify(script: Path, steps: int) -> tuple[str, str]:
    result = _mpfix("verify", str(script), "--steps", str(steps), "--no-baseline", "--device", "cpu",
                    "--timeout", "240")
    return VERDICTS.get(result.returncode, f"exit {result.returncode}"), result.stdout + result.stderr


def test_every_sample_is_covered():
    assert sorted(p.name for p in SAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """check on samples/, apply on a copy, check again (no TensorFlow: the check tests need only these)."""
    check = _mpfix("check", "--format", "json", "--no-cache", str(SAMPLES))
    fixed = tmp_path_factory.mktemp("samples")
    for name in EXPECTED:
        shutil.copy2(SAMPLES / name, fixed / name)
    apply = _mpfix("apply", "--unsafe-fixes", "--no-cache", ".", cwd=fixed)
    recheck = _mpfix("check", "--no-cache", ".", cwd=fixed)
    return {"check": check, "apply": apply, "recheck": recheck, "fixed": fixed}


@pytest.fixture(scope="module")
def verdicts(runs):
    """Every verify run, before and after the fix (in parallel): one TensorFlow child each."""
    jobs = {(name, "before"): (SAMPLES / name, e.steps) for name, e in EXPECTED.items()}
    jobs.update({(name, "after"): (runs["fixed"] / name, e.steps) for name, e in EXPECTED.items() if e.codes})
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(_verify, *args) for key, args in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_finds_the_bug(runs, name):
    assert runs["check"].returncode == 1, runs["check"].stderr
    found = {item["code"] for item in json.loads(runs["check"].stdout) if Path(item["filename"]).name == name}
    assert found == EXPECTED[name].codes


def test_apply_unsafe_fixes_leaves_nothing_to_find(runs):
    assert runs["apply"].returncode == 0, runs["apply"].stdout + runs["apply"].stderr
    assert runs["recheck"].returncode == 0, runs["recheck"].stdout
    assert "All checks passed!" in runs["recheck"].stdout
    healthy = "healthy_training.py"
    assert (runs["fixed"] / healthy).read_text() == (SAMPLES / healthy).read_text()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verify_before_and_after_the_fix(verdicts, name):
    expected = EXPECTED[name]
    verdict, output = verdicts[(name, "before")]
    assert verdict == expected.before, output
    if expected.codes:
        verdict, output = verdicts[(name, "after")]
        assert verdict == expected.after, output


def test_readme_verify_examples_agree_with_the_measured_verdicts():
    # The README pastes `mpfix verify --before-after` output; its verdict lines must say what
    # this module measures (the runs above), so the walkthrough cannot promise another outcome.
    import re

    from test_readme import README, commands

    shown = [c for c in commands(README.read_text(encoding="utf-8"))
             if c.line.startswith("mpfix verify") and "--before-after" in c.line]
    assert len(shown) >= 2  # the walkthrough's two before/after examples (the --workers one has no "after")
    for cmd in shown:
        name = Path(cmd.line.split()[2]).name
        verdict = re.search(r"^verdict: (\S+) -> (\S+)$", cmd.output, re.MULTILINE)
        assert verdict is not None, cmd.line
        assert verdict.groups() == (EXPECTED[name].before, EXPECTED[name].after), cmd.line
