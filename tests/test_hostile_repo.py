"""A repository from a stranger (issue 21): FIFOs, devices, symlinks out of the tree, a shipped cache,
concurrent edits, hard links. Each case uses the real filesystem and runs the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix import safe_read
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all
from mpfix.writer import ChangedError, write_atomic

EXIT_ERROR = 2
# A project that sets the policy: the float16 scan reads every project file.
POLICY = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\nimport a\n'


def mpfix(*args: str, cwd: Path, timeout: float = 60, cache: bool = False, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1")
    env.pop("MPFIX_CACHE_DIR", None)
    if not cache:
        env["MPFIX_CACHE_DIR"] = str(cwd / ".cache-for-test")
    return subprocess.run([sys.executable, "-m", "mpfix", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'hostile'\n")
    return root


# -- reading ------------------------------------------------------------------------------------

def test_a_fifo_in_a_project_the_float16_scan_reads_does_not_hang(project: Path):
    # Reproduced on main before the fix: this hung forever, and SIGTERM did not end it.
    sample = Path(__file__).resolve().parents[1] / "samples" / "tf24_era_training.py"
    (project / "a.py").write_bytes(sample.read_bytes())
    (project / "b.py").write_text(POLICY)
    os.mkfifo(project / "pipe.py")  # scanned for entry points along with every project file
    os.mkfifo(project / "helper.ipynb")
    result = mpfix("check", "a.py", "b.py", cwd=project, timeout=60)
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert result.returncode in (0, 1), output


def test_fifos_devices_and_sockets_are_skipped_with_a_clear_message(project: Path):
    import socket

    os.mkfifo(project / "pipe.py")
    (project / "zero.py").symlink_to("/dev/zero")  # also a link out of the tree
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(project / "sock.py"))
    try:
        result = mpfix("check", ".", cwd=project, timeout=60)
    finally:
        server.close()
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_ERROR and "Traceback" not in output, output
    assert "pipe.py:1:1: MP000 cannot read file: not a regular file (a FIFO), skipped" in output
    assert "zero.py:1:1: MP000 symbolic link to /dev/zero outside the project" in output
    assert "not followed" in output
    assert "sock.py:1:1: MP000 cannot read file: not a regular file (a socket), skipped" in output


def test_the_safe_reader_refuses_devices_and_bounds_what_it_reads(tmp_path: Path):
    with pytest.raises(safe_read.Refused, match=r"\(a device\)"):
        safe_read.read_bytes("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    # No writer: a plain open() would block forever. In a thread, so that a blocked open fails here (it
    # is then released by opening the FIFO's write end) instead of hanging the test; no clock to race.
    outcome: list = []

    def read_fifo() -> None:
        try:
            outcome.append(safe_read.read_bytes(tmp_path / "fifo"))
        except safe_read.Refused as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read_fifo, daemon=True)
    reader.start()
    reader.join(120)  # a bound for a loaded machine: the refusal takes microseconds
    if reader.is_alive():
        os.close(os.open(tmp_path / "fifo", os.O_WRONLY | os.O_NONBLOCK))  # releases the blocked open
        pytest.fail("reading a FIFO with no writer blocked")
    assert len(outcome) == 1 and isinstance(outcome[0], safe_read.Refused), outcome
    assert "(a FIFO)" in str(outcome[0]), outcome
    (tmp_path / "big").write_bytes(b"x" * 1001)
    with pytest.raises(safe_read.Refused, match="too large"):
        safe_read.read_bytes(tmp_path / "big", limit=1000)
    assert safe_read.read_bytes(tmp_path / "big", limit=1001) == b"x" * 1001


def test_a_requirements_include_of_dev_zero_is_not_read(project: Path):
    (project / "requirements.txt").write_text("-r /dev/zero\n-r pipe.txt\ntensorflow<2.16\n")
    os.mkfifo(project / "pipe.txt")
    (project / "model.py").write_text(DEPRECATED)
    result = mpfix("check", "--verbose", "model.py", cwd=project, timeout=60)
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert result.returncode == 1, output
    assert "MP306" in result.stdout  # the rest of the requirements still counts


def test_a_symlink_out_of_the_tree_is_not_followed_and_not_written(project: Path, tmp_path: Path):
    outside = tmp_path / "outside.py"
    outside.write_text(DEPRECATED)
    (project / "inside.py").write_text(DEPRECATED)
    (project / "link.py").symlink_to(outside)
    (project / "sibling.py").symlink_to(project / "inside.py")  # a link inside the tree is fine
    result = mpfix("apply", ".", cwd=project)
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_ERROR and "Traceback" not in output, output
    assert f"link.py:1:1: MP000 symbolic link to {outside} outside the project" in output
    assert outside.read_text() == DEPRECATED  # never written
    assert (project / "inside.py").read_text() == DEPRECATED_FIXED
    assert (project / "sibling.py").is_symlink()


def test_add_noqa_does_not_write_through_a_link_out_of_the_tree(project: Path, tmp_path: Path):
    outside = tmp_path / "outside.py"
    outside.write_text(DEPRECATED)
    (project / "link.py").symlink_to(outside)
    result = mpfix("check", "--add-noqa", ".", cwd=project)
    assert "Traceback" not in result.stdout + result.stderr
    assert outside.read_text() == DEPRECATED


def test_the_writer_refuses_a_link_out_of_the_tree(project: Path, tmp_path: Path):
    outside = tmp_path / "outside.py"
    outside.write_text("x = 1\n")
    (project / "link.py").symlink_to(outside)
    with pytest.raises(safe_read.Refused, match="not followed"):
        write_atomic(project / "link.py", b"x = 2\n")
    assert outside.read_text() == "x = 1\n"


# -- the cache folder ---------------------------------------------------------------------------

def test_a_shipped_cache_folder_symlink_is_not_written_through(project: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".mpfix_cache").symlink_to(elsewhere)
    (project / "model.py").write_text(DEPRECATED)
    result = mpfix("check", ".", cwd=project, cache=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_dangling_gitignore_symlink_in_the_cache_folder_creates_nothing(project: Path, tmp_path: Path):
    target = tmp_path / "created-by-mpfix"
    (project / ".mpfix_cache").mkdir()
    (project / ".mpfix_cache" / ".gitignore").symlink_to(target)
    (project / "model.py").write_text(DEPRECATED)
    for _ in range(2):
        result = mpfix("check", ".", cwd=project, cache=True)
        assert result.returncode == 1, result.stdout + result.stderr
    assert not target.exists()
    assert not os.path.exists(target)


def test_a_shipped_version_subfolder_symlink_is_not_written_through(project: Path, tmp_path: Path):
    from mpfix import __version__

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".mpfix_cache").mkdir()
    (project / ".mpfix_cache" / __version__).symlink_to(elsewhere)
    (project / "model.py").write_text(DEPRECATED)
    result = mpfix("check", ".", cwd=project, cache=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert list(elsewhere.iterdir()) == []


def _job() -> Job:
    from mpfix.codemods import all_rules

    return Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(keras="3"), mode=Mode.CHECK)


def _findings_file(project: Path) -> Path:
    (found,) = (project / ".mpfix_cache").rglob("*.findings.json")
    return found


@pytest.mark.parametrize("damage", ["types", "deep", "forged", "moved"])
def test_a_poisoned_findings_cache_is_ignored_and_rewritten(project: Path, monkeypatch, damage: str):
    monkeypatch.delenv("MPFIX_CACHE_DIR", raising=False)
    monkeypatch.chdir(project)
    (project / "model.py").write_text(DEPRECATED)
    (project / "other.py").write_text("import tensorflow as tf\n\nx = 1\n")
    files = [project / "model.py", project / "other.py"]
    (first, other) = process_all(files, _job(), jobs=1)
    assert first.findings and not other.findings
    store = _findings_file(project)
    entries = json.loads(store.read_text())
    ((name, entry),) = entries.items()
    if damage == "types":
        entry["findings"][0]["start"] = ["1", None]
    elif damage == "deep":
        store.write_text('{"%s": %s%s}' % (name, "[" * 100_000, "]" * 100_000))
    elif damage == "forged":
        entry["findings"] = []  # well-formed, hides the finding; the seal no longer matches
    elif damage == "moved":
        pass
    if damage != "deep":
        store.write_text(json.dumps(entries))
    if damage == "moved":
        # The entry of model.py's bytes under the path of a file with other bytes: not its entry.
        (project / "other.py").write_text(DEPRECATED)
        (_, again) = process_all(files, _job(), jobs=1)
        assert not again.cached and [f.code for f in again.findings] == [f.code for f in first.findings]
        return
    (again, _) = process_all(files, _job(), jobs=1)
    assert not again.cached
    assert [(f.code, f.line) for f in again.findings] == [(f.code, f.line) for f in first.findings]
    rewritten = json.loads(_findings_file(project).read_text())
    assert all(isinstance(e, dict) and "seal" in e for e in rewritten.values())
    (third, _) = process_all(files, _job(), jobs=1)
    assert third.cached and [(f.code, f.line) for f in third.findings] == [(f.code, f.line) for f in first.findings]


def test_a_clean_key_shipped_in_a_checkout_does_not_hide_findings(project: Path, monkeypatch):
    """The clean set holds bare keys: one a checkout ships for its own file must not match."""
    import hashlib

    from mpfix import cache as cache_mod

    monkeypatch.delenv("MPFIX_CACHE_DIR", raising=False)
    (project / "model.py").write_text(DEPRECATED)
    store = cache_mod.Cache(cache_mod.cache_dir_for([project / "model.py"]), _job())
    unkeyed = hashlib.blake2b(DEPRECATED.encode(), digest_size=16).digest()
    assert store.keyer.key(project / "model.py", DEPRECATED.encode()) != unkeyed
    store.file.parent.mkdir(parents=True, exist_ok=True)
    store.file.write_bytes(cache_mod._MAGIC + unkeyed)
    (result,) = process_all([project / "model.py"], _job(), jobs=1)
    assert not result.cached and result.findings


# -- writing: concurrent edits and hard links ---------------------------------------------------

def test_apply_skips_a_file_changed_after_it_was_read(project: Path):
    path = project / "model.py"
    path.write_text(DEPRECATED)
    read = path.read_bytes()
    path.write_text(DEPRECATED + "# the user's edit\n")  # an editor saves meanwhile
    with pytest.raises(ChangedError):
        write_atomic(path, DEPRECATED_FIXED.encode(), expected=read)
    assert path.read_text() == DEPRECATED + "# the user's edit\n"


def test_apply_reports_a_concurrent_edit_and_keeps_it(project: Path, monkeypatch):
    """A real second writer between mpfix's read and its write: the edit survives, the file is reported."""
    from mpfix import runner

    path = project / "model.py"
    path.write_text(DEPRECATED)
    real_read = runner._read

    def read_then_edit(file, limit):
        data = real_read(file, limit)
        subprocess.run([sys.executable, "-c", f"open({str(file)!r}, 'a').write('# edited\\n')"], check=True)
        return data

    monkeypatch.setattr(runner, "_read", read_then_edit)
    job = Job(rule_codes=_job().rule_codes, options=Options(keras="3"), mode=Mode.APPLY)
    (result,) = process_all([path], job, jobs=1, cache=False)
    assert not result.written
    assert [e.message for e in result.errors] == [
        "file changed since mpfix read it; skipped, nothing was written (run mpfix again)"]
    assert path.read_text() == DEPRECATED + "# edited\n"


def test_apply_keeps_hard_links(project: Path):
    path = project / "model.py"
    path.write_text(DEPRECATED)
    os.link(path, project / "alias.py")
    inode = path.stat().st_ino
    result = mpfix("apply", "model.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.stat().st_ino == inode and path.stat().st_nlink == 2
    assert (project / "alias.py").read_text() == DEPRECATED_FIXED
    assert not [p for p in project.iterdir() if "mpfix-backup" in p.name or "mpfix-tmp" in p.name]
