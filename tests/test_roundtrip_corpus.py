"""Round trip on real code: `mpfix apply --unsafe-fixes` over published sources never harms them.

Corpus: every Python file of the installed ``keras`` and ``tf_keras`` packages
(always there: TensorFlow and the test extra depend on them), of the
``tf-models-official`` wheel (``pip download``, kept under ``.bench/wheels``; when
the registry cannot be reached within a minute, without it, with a warning) and of
the precision benchmark's DeepLearningExamples and addons corpora where they are
downloaded (``$MPFIX_CORPORA``, see benchmarks/precision): up to about 3,600 files,
with ``--policy mixed_float16`` so that every float16 rule runs everywhere.
Invariants: no internal error (MP000 "internal error"), every changed file
compiles and passes the undefined-name check (pyflakes: no name undefined that the
original did not leave undefined), a second ``apply`` (without the cache, so every
file is linted again) changes nothing, every file not reported as changed is
byte-identical.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from mpfix.fix_validation import undefined_names

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".bench" / "wheels"
TFM = "tf-models-official==2.20.0"


def _keras_sources(package: str = "keras") -> Path:
    spec = importlib.util.find_spec(package)  # no import: that would load TensorFlow
    assert spec is not None and spec.submodule_search_locations, f"{package} must be installed"
    return Path(list(spec.submodule_search_locations)[0])


def _precision_corpora() -> dict[str, Path]:
    """The downloaded corpora of benchmarks/precision (DeepLearningExamples, addons), where present."""
    base = Path(os.environ.get("MPFIX_CORPORA", "/work/corpora"))
    found = {name: base / sub for name, sub in (("dle", "dle/TensorFlow2"), ("addons", "addons"))}
    return {name: folder for name, folder in found.items() if folder.is_dir()}


def _tfm_wheel() -> Path | None:
    found = sorted(WHEELS.glob("tf_models_official-2.20.0-*.whl"))
    if not found:
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", TFM, "-d", str(WHEELS)],
                           check=True, timeout=60, capture_output=True)
        except (subprocess.SubprocessError, OSError) as exc:
            warnings.warn(f"tf-models-official could not be downloaded ({exc}); round trip on keras sources only")
            return None
        found = sorted(WHEELS.glob("tf_models_official-2.20.0-*.whl"))
    return found[0] if found else None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("roundtrip")
    (root / "pyproject.toml").write_text("[project]\nname = 'roundtrip-corpus'\n")
    keras = _keras_sources()
    sources = {p.relative_to(keras).as_posix(): p.read_bytes() for p in keras.rglob("*.py")}
    _copy(root / "keras", sources)
    tf_keras = _keras_sources("tf_keras")  # the test extra installs it
    _copy(root / "tf_keras", {p.relative_to(tf_keras).as_posix(): p.read_bytes() for p in tf_keras.rglob("*.py")})
    wheel = _tfm_wheel()
    if wheel is not None:
        with zipfile.ZipFile(wheel) as archive:
            sources = {n: archive.read(n) for n in archive.namelist() if n.endswith(".py")}
        _copy(root / "tfm", sources)
    for name, folder in _precision_corpora().items():
        _copy(root / name, {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.py")})
    return root


def _copy(dest: Path, sources: dict[str, bytes]) -> None:
    for name in sorted(sources):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(sources[name])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def _apply(root: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(root.parent / (root.name + "-cache")), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "mpfix", "apply", "--unsafe-fixes", "--policy", "mixed_float16",
                           "--jobs", "2", *extra, "."], cwd=root, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_apply_on_real_code_is_safe_and_idempotent(corpus: Path):
    before = _snapshot(corpus)
    assert len(before) >= 900, f"corpus too small: {len(before)} files"
    first = _apply(corpus)
    output = first.stdout + first.stderr
    assert "Traceback" not in output, output[-5000:]
    crashes = [line for line in output.splitlines() if "MP000" in line and "could not be checked" not in line]
    assert not crashes, "\n".join(crashes)
    assert first.returncode in (0, 1), output[-3000:]

    after = _snapshot(corpus)
    assert after.keys() == before.keys()
    changed = [name for name in before if after[name] != before[name]]
    assert changed, "no file changed: the corpus no longer exercises any fix"
    unbound = {}
    for name in changed:
        try:
            compile(after[name], name, "exec", dont_inherit=True)
        except SyntaxError as exc:  # pragma: no cover - the assertion message is the point
            pytest.fail(f"{name} no longer compiles after apply: {exc}")
        old_names = undefined_names(before[name].decode("utf-8", "replace"), name)
        new_names = undefined_names(after[name].decode("utf-8", "replace"), name)
        assert new_names is not None, f"{name}: pyflakes cannot read the fixed file"
        if old_names is not None and new_names - old_names:
            unbound[name] = sorted(new_names - old_names)
    assert not unbound, f"fixes left names unbound: {unbound}"

    second = _apply(corpus, "--no-cache")
    assert second.returncode in (0, 1), (second.stdout + second.stderr)[-3000:]
    again = _snapshot(corpus)
    moved = [name for name in again if again[name] != after[name]]
    assert not moved, f"a second apply changed {moved[:10]}"
    assert "Fixed" not in second.stdout

    # Files the first apply did not change are byte-identical (checked by construction above);
    # and no stray files appeared (temp files of atomic writes, backups).
    stray = [p.name for p in corpus.rglob("*") if p.is_file() and p.suffix not in (".py", ".toml")]
    assert not stray, stray
    print(f"round trip: {len(before)} files, {len(changed)} changed")
