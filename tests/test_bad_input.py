"""Files and situations mpfix must survive: a clear message, exit 2, nothing written, never a traceback.

Each case runs the real command line in a subprocess, as a user or pre-commit would.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

EXIT_ERROR = 2


def mpfix(*args: str, cwd: Path, preexec_fn=None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(cwd / ".cache-for-test"), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "mpfix", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec_fn)


def snapshot(folder: Path) -> dict[str, object]:
    """Every entry's bytes (or link target) and mode, to prove nothing was written."""
    state: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".cache-for-test"]
        for name in filenames + dirnames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            if path.is_symlink():
                state[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                state[str(path)] = ("file", st.st_mode, path.read_bytes())
            else:
                state[str(path)] = ("other", st.st_mode)
    return state


def assert_clean_failure(result: subprocess.CompletedProcess, *expected: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_ERROR, output
    assert "Traceback" not in output
    for text in expected:
        assert text in output, output


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'bad-input'\n")
    return tmp_path


# A trigger (experimental_relax_shapes) makes sure the file is parsed, not skipped by the prefilter.
BROKEN = [
    ("syntax.py", DEPRECATED + "def broken(:\n    pass\n", ["MP000", "SyntaxError: invalid syntax", "syntax.py:10:12:"]),
    ("py2.py", DEPRECATED + 'print "hello"\n', ["MP000", "looks like Python 2"]),
    ("binary.py", b"\x7fELF\x02\x01\x01\x00\x00experimental_relax_shapes\x00\xff", ["not a Python source file", "NUL bytes"]),
    ("latin.py", DEPRECATED.encode() + b"name = 'caf\xe9'\n", ["cannot decode as utf-8", "0xe9", "latin.py:10:12"]),
    ("cookie.py", b"# -*- coding: klingon -*-\n" + DEPRECATED.encode(), ["MP000", "klingon"]),
    # Codecs that exist but do not decode bytes to text (CPython: "'rot13' is not a text encoding"): an MP000
    # "internal error ... please report it" before, from the LookupError of bytes.decode.
    ("rot13.py", "# coding: rot13\n" + DEPRECATED,
     ["rot13.py:1:1: MP000 cannot read encoding declaration: 'rot13' is not a text encoding"]),
    ("hexcodec.py", "# -*- coding: hex -*-\n" + DEPRECATED, ["hexcodec.py:1:1: MP000 ", "'hex' is not a text encoding"]),
]


@pytest.mark.parametrize("command", ["check", "apply"])
def test_unreadable_sources(folder: Path, command: str):
    # One run over all of them: each gets its own message, the others still run, nothing is written.
    for name, content, _ in BROKEN:
        (folder / name).write_bytes(content.encode() if isinstance(content, str) else content)
    (folder / "fine.py").write_text(DEPRECATED)
    before = snapshot(folder)
    result = mpfix(command, "--unsafe-fixes", *(b[0] for b in BROKEN), cwd=folder)
    assert_clean_failure(result, *(m for _, _, messages in BROKEN for m in messages))
    assert result.stdout.count(": MP000 ") == len(BROKEN)
    assert "internal error" not in result.stdout
    assert snapshot(folder) == before


def test_the_default_size_limit_is_2_mib_and_the_setting_raises_it(folder: Path):
    # 10 MB of short lines could need ~15 GB in LibCST (1.2 MB of them: 1.8 GB), so the default is
    # 2 MiB; a project that wants bigger files says so.
    path = folder / "generated.py"
    path.write_bytes(b"x = 1\n" * (3 * 1024 * 1024 // 6))
    result = mpfix("check", "generated.py", cwd=folder)
    assert_clean_failure(result, "file is too large (3.1 MB > 2.1 MB)", "max-file-size")
    (folder / "pyproject.toml").write_text("[tool.mpfix]\nmax-file-size = 4194304\n")
    result = mpfix("check", "generated.py", cwd=folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "too large" not in result.stdout + result.stderr


def test_a_notebook_with_big_outputs_is_read_under_the_2_mib_default(folder: Path):
    # Most of a notebook's bytes are its outputs (a plot is ~100 KB of base64): up to 10 MiB is read.
    import json

    plot = {"output_type": "display_data", "data": {"image/png": "A" * (3 * 1024 * 1024)}, "metadata": {}}
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [plot],
            "source": ["import tensorflow as tf\n", "x = tf.constant(1.0)\n"]}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "plots.ipynb").write_text(json.dumps(notebook))
    result = mpfix("check", "plots.ipynb", cwd=folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "too large" not in result.stdout + result.stderr


@pytest.mark.parametrize("codec", ["rot13", "hex", "zlib_codec", "base64"])
def test_instrument_refuses_a_coding_line_that_is_not_a_text_encoding(folder: Path, codec: str):
    (folder / "train.py").write_text(f"# coding: {codec}\n" + DEPRECATED)
    result = mpfix("instrument", "train.py", cwd=folder)
    assert_clean_failure(result, f"train.py:1:1: error: cannot read: cannot read encoding declaration: "
                                 f"'{codec}' is not a text encoding")


@pytest.mark.parametrize("newline,bom", [("\r\n", False), ("\n", True), ("\r\n", True)], ids=["crlf", "bom", "crlf+bom"])
def test_crlf_and_bom_round_trip_byte_for_byte(folder: Path, newline: str, bom: bool):
    prefix = codecs.BOM_UTF8 if bom else b""
    original = prefix + DEPRECATED.replace("\n", newline).encode()
    expected = prefix + DEPRECATED_FIXED.replace("\n", newline).encode()
    (folder / "a.py").write_bytes(original)
    (folder / "untouched.py").write_bytes(prefix + b"x = 1\r\ny = 2\n")  # mixed endings, no finding
    result = mpfix("apply", ".", cwd=folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (folder / "a.py").read_bytes() == expected
    assert (folder / "untouched.py").read_bytes() == prefix + b"x = 1\r\ny = 2\n"


def test_a_20_mb_file_is_refused_without_reading_it_all(folder: Path):
    path = folder / "huge.py"
    line = b"x = 'experimental_relax_shapes' * 3  # filler\n"
    with open(path, "wb") as handle:
        handle.write(line * (20 * 1024 * 1024 // len(line) + 1))
    before = snapshot(folder)
    started = time.monotonic()
    result = mpfix("apply", "huge.py", cwd=folder)
    assert_clean_failure(result, "file is too large (21.0 MB > 2.1 MB)", "max-file-size")
    assert time.monotonic() - started < 30  # refused before parsing (a parse would take minutes)
    assert snapshot(folder) == before


def _drop_root_file_access() -> None:
    """In the child: give up root's right to ignore permission bits (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH).

    Tests run as root in CI, and root reads a mode-000 file; without these two
    capabilities in the bounding set, the exec'ed mpfix gets EACCES like any user.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(pr_capbset_drop, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_a_file_without_read_permission(folder: Path):
    (folder / "pkg").mkdir()
    path = folder / "pkg" / "secret.py"
    path.write_text(DEPRECATED)
    (folder / "pkg" / "open.py").write_text(DEPRECATED)
    path.chmod(0o000)
    try:
        drop = _drop_root_file_access if os.geteuid() == 0 else None
        probe = subprocess.run(["cat", str(path)], capture_output=True, preexec_fn=drop)
        assert probe.returncode != 0, "the child can still read a mode-000 file: the test would prove nothing"
        # Found by walking a folder: reported, the other file is still fixed.
        result = mpfix("apply", "pkg", cwd=folder, preexec_fn=drop)
        assert_clean_failure(result, "pkg/secret.py:1:1: MP000 cannot read file: Permission denied")
        assert (folder / "pkg" / "open.py").read_text() == DEPRECATED_FIXED
        # Named on the command line: the argument parser refuses it up front.
        result = mpfix("check", "pkg/secret.py", cwd=folder, preexec_fn=drop)
        assert_clean_failure(result, "Path 'pkg/secret.py' is not readable")
    finally:
        path.chmod(0o644)
    assert path.read_text() == DEPRECATED


def test_a_read_only_file_is_not_fixed(folder: Path):
    path = folder / "frozen.py"
    path.write_text(DEPRECATED)
    path.chmod(0o444)
    before = snapshot(folder)
    result = mpfix("apply", "frozen.py", cwd=folder)
    assert_clean_failure(result, "frozen.py:1:1: MP000 file is read-only; nothing was written")
    assert snapshot(folder) == before  # even as root, which could write it


def test_symlink_loops_in_a_folder(folder: Path):
    pkg = folder / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text(DEPRECATED)
    (pkg / "again").symlink_to(pkg)  # a folder loop: must not be walked forever
    (pkg / "a.py").symlink_to(pkg / "b.py")
    (pkg / "b.py").symlink_to(pkg / "a.py")
    (pkg / "gone.py").symlink_to(folder / "missing.py")
    before = snapshot(folder)
    result = mpfix("check", "pkg", cwd=folder, timeout=60)
    assert_clean_failure(result, "pkg/a.py:1:1: MP000 cannot read file: symbolic link loop",
                         "pkg/b.py:1:1: MP000 cannot read file: symbolic link loop",
                         "pkg/gone.py:1:1: MP000 cannot read file: broken symbolic link",
                         "pkg/ok.py:4:14: MP306")
    assert "again" not in result.stdout  # the folder link was not entered: ok.py is reported once
    assert result.stdout.count("ok.py:4:14: MP306") == 1
    assert snapshot(folder) == before


def test_a_fifo_named_py_does_not_block(folder: Path):
    os.mkfifo(folder / "pipe.py")
    result = mpfix("check", ".", cwd=folder, timeout=60)
    assert_clean_failure(result, "pipe.py:1:1: MP000 cannot read file: not a regular file")


def test_a_file_deleted_between_discovery_and_reading(folder: Path):
    from mpfix.discovery import discover

    for name in ("a.py", "b.py", "c.py"):
        (folder / name).write_text(DEPRECATED)
    files = list(discover([folder]))
    (folder / "b.py").unlink()  # another process (git checkout, an editor) removes it now
    job = Job(rule_codes=("MP306", "MP307"), options=Options(), mode=Mode.APPLY)
    results = process_all(files, job, jobs=2, cache=False)
    assert [r.path.name for r in results] == ["a.py", "b.py", "c.py"]
    assert [e.message for e in results[1].errors] == ["cannot read file: no such file (deleted while mpfix was running?)"]
    assert not (folder / "b.py").exists()  # not recreated
    assert results[0].written and results[2].written


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_apply_interrupted_mid_run_leaves_no_truncated_file(folder: Path, signum: int, jobs: str):
    # Many files with a fix each: the signal lands while files are being read,
    # fixed and written. Every file must end as exactly the old or the new text.
    filler = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(40))
    old = DEPRECATED + "\n\n" + filler
    new = DEPRECATED_FIXED + "\n\n" + filler
    files = [folder / f"step_{i:03d}.py" for i in range(150)]
    for path in files:
        path.write_text(old)
    env = dict(os.environ, MPFIX_CACHE_DIR=str(folder / ".cache-for-test"), NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "mpfix", "apply", "--jobs", jobs, "."], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not any(p.read_text() == new for p in files[:20]) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    contents = [p.read_text() for p in files]
    assert all(text in (old, new) for text in contents), "a file was left half-written"
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".mpfix-tmp")], "a temp file was left behind"
    assert "Traceback" not in stderr, stderr
    if signum == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM and "mpfix: terminated" in stderr, stdout + stderr
    else:
        # 130 = 128 + SIGINT, what a shell expects of an interrupted command (not 1, "findings").
        assert proc.returncode == 130 and "interrupted" in stderr, stdout + stderr
    assert contents.count(new) >= 1 and contents.count(old) >= 1  # it really stopped mid-run


# -- issue 15, defects 4 and 5 ---------------------------------------------------------------------

@pytest.mark.parametrize(("source", "where", "message"), [
    # LibCST's own parser said 2:14 and 4:5 here: the position after the error.
    ('print "hello"\n' + DEPRECATED, "py2.py:1:1:", "Missing parentheses in call to 'print'"),
    (DEPRECATED.replace("@tf.function(experimental_relax_shapes=True)",
                        "@tf.function(experimental_relax_shapes=True", 1), "py2.py:4:13:", "'(' was never closed"),
    (DEPRECATED + "def broken(:\n    pass\n", "py2.py:10:12:", "invalid syntax"),
])
def test_syntax_errors_are_placed_by_cpython(folder: Path, source: str, where: str, message: str):
    assert "experimental_relax_shapes" in source  # a trigger: the file is parsed, not skipped
    (folder / "py2.py").write_text(source)
    result = mpfix("check", "py2.py", cwd=folder)
    assert_clean_failure(result, f"{where} MP000 SyntaxError: {message}".replace("SyntaxError: SyntaxError: ",
                                                                                   "SyntaxError: "))


def test_a_pyproject_that_does_not_parse_is_an_error(folder: Path):
    (folder / "pyproject.toml").write_text("[tool.mpfix]\nselect = [\"MP3\"\n")
    (folder / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "train.py", cwd=folder)
    assert_clean_failure(result, f"mpfix: error: {folder / 'pyproject.toml'}: not valid TOML")
    assert "MP306" not in result.stdout  # not checked with other settings instead


def test_a_path_with_no_python_files_says_so(folder: Path):
    (folder / "docs").mkdir()
    (folder / "docs" / "index.md").write_text("# nothing to check\n")
    result = mpfix("check", "docs", cwd=folder)
    assert result.returncode == 0  # Ruff's choice: a warning, not an error
    assert "mpfix: warning: no Python files found (.py, .ipynb) under docs" in result.stderr


def test_python_dash_m_works_from_the_folder_that_holds_a_clone_named_mpfix(tmp_path: Path):
    # The clone's root has no __init__.py: Python makes it a namespace package `mpfix`,
    # found before an editable install's import hook.
    (tmp_path / "mpfix").mkdir()
    (tmp_path / "mpfix" / "README.md").write_text("a clone\n")
    (tmp_path / "train.py").write_text(DEPRECATED)
    result = subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", "train.py"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "train.py:4:14: MP306" in result.stdout


def test_fix_only_writes_fixes_and_ignores_what_is_left(folder: Path):
    (folder / "train.py").write_text(DEPRECATED)
    first = mpfix("apply", "--fix-only", "train.py", cwd=folder)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout == ""  # leftover findings are the check hook's to report
    assert first.stderr.strip().startswith("mpfix: fixed ") and first.stderr.strip().endswith(" in 1 file")
    assert (folder / "train.py").read_text() == DEPRECATED_FIXED
    again = mpfix("apply", "--fix-only", "train.py", cwd=folder)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    # A finding with no safe fix (MP201's fix is unsafe) is left for the check hook: exit 0, no output.
    unfixable = (Path(__file__).resolve().parents[1] / "samples" / "attention_mask_1e9.py").read_text()
    (folder / "mask.py").write_text(unfixable)
    left = mpfix("apply", "--fix-only", "mask.py", cwd=folder)
    assert (left.returncode, left.stdout, left.stderr) == (0, "", "")
    assert (folder / "mask.py").read_text() == unfixable
    assert mpfix("check", "mask.py", cwd=folder).returncode == 1
    changed = folder / "other.py"
    changed.write_text(DEPRECATED)
    flagged = mpfix("apply", "--fix-only", "--exit-non-zero-on-fix", "other.py", cwd=folder)
    assert flagged.returncode == 1


def test_user_text_reaches_libcst_only_through_the_guarded_parse():
    # LibCST's native parser segfaults or takes minutes on deeply nested text; mpfix.parsing.parse_module
    # measures the depth with CPython's parser first. A direct libcst.parse_module anywhere else (the
    # verify side had four) would let hostile input crash that path again.
    import ast

    root = Path(__file__).resolve().parents[1]
    direct = []
    for folder in (root / "mpfix", root / "codemods"):
        for path in folder.rglob("*.py"):
            # parsing.py is the guarded parse; parse_probe.py parses only in a child process (its guard).
            if path in (root / "mpfix" / "parsing.py", root / "mpfix" / "parse_probe.py") or "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                called = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "parse_module" and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in ("cst", "libcst")
                imported = isinstance(node, ast.ImportFrom) and node.module == "libcst" \
                    and any(alias.name == "parse_module" for alias in node.names)
                if called or imported:
                    direct.append(f"{path.relative_to(root)}:{node.lineno}")
    assert direct == []


@pytest.mark.parametrize("fmt", ["text", "sarif"])
def test_toml_nested_too_deeply_is_a_config_error_or_ignored_never_a_traceback(tmp_path: Path, fmt: str):
    # tomllib recurses once per level: 5,000 nested arrays were a RecursionError traceback from the
    # settings loader (pyproject.toml) and an MP000 "internal error" / a traceback (SARIF run metadata)
    # from the declared-dependency reader (Pipfile).
    deep = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    (tmp_path / "train.py").write_text(DEPRECATED)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.mpfix]\n" + deep)
    done = mpfix("check", "--format", fmt, "train.py", cwd=tmp_path)
    assert done.returncode == EXIT_ERROR and "Traceback" not in done.stderr
    assert "pyproject.toml: not TOML mpfix can read: a value is nested too deeply" in done.stderr
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "Pipfile").write_text("[packages]\n" + deep)
    done = mpfix("check", "--format", fmt, "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert '"ruleId": "MP306"' in done.stdout if fmt == "sarif" else "MP306" in done.stdout
    assert "internal error" not in done.stdout and '"ruleId": "MP000"' not in done.stdout


def test_globs_with_many_globstars_cannot_stall_discovery(tmp_path: Path):
    # Each `**` of a glob is a backtracking regex group: `**/a*/` x 10 against a 40-folder-deep path
    # took minutes per file. Such a .gitignore line is not used (its other lines are); such an
    # exclude glob is a configuration error.
    hostile = "/".join(["**/a*"] * 10) + "/x"
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text(hostile + "\nignored.py\n")
    deep = tmp_path.joinpath(*(["a"] * 40))
    deep.mkdir(parents=True)
    (deep / "train.py").write_text(DEPRECATED)
    (tmp_path / "ignored.py").write_text(DEPRECATED)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    done = mpfix("check", ".", cwd=tmp_path, timeout=60)
    assert done.returncode == 1 and "train.py" in done.stdout and "ignored.py" not in done.stdout
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n\n[tool.mpfix]\nexclude = [{hostile!r}]\n")
    done = mpfix("check", ".", cwd=tmp_path, timeout=60)
    assert done.returncode == EXIT_ERROR and "has more than 3 `**`" in done.stderr and "Traceback" not in done.stderr
