"""[tool.mpfix] settings and inline suppression."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DEPRECATED

from mpfix import config
from mpfix.cli import cli


def mpfix(*args: str):
    return CliRunner().invoke(cli, list(args))


def write_config(project: Path, body: str) -> None:
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.mpfix]\n" + body)


def test_config_select_and_ignore(project: Path):
    write_config(project, 'ignore = ["MP307"]\n')
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "train.py")
    assert "MP306" in result.output and "MP307" not in result.output
    # The command line wins over the file.
    assert "MP307" in mpfix("check", "--select", "MP307", "--ignore", "MP306", "train.py").output


def test_config_exclude_and_per_file_ignores(project: Path):
    write_config(project, 'exclude = ["generated/*"]\n[tool.mpfix.per-file-ignores]\n"legacy/*.py" = ["MP306"]\n')
    for folder in ("generated", "legacy", "src"):
        (project / folder).mkdir()
        (project / folder / "train.py").write_text(DEPRECATED)
    output = mpfix("check", ".").output
    assert "generated" not in output
    assert "legacy/train.py:9:1: MP307" in output and "legacy/train.py:4:14: MP306" not in output
    assert "src/train.py:4:14: MP306" in output


def test_config_from_a_parent_folder_is_found(project: Path):
    write_config(project, 'select = ["MP307"]\n')
    (project / "pkg").mkdir()
    (project / "pkg" / "train.py").write_text(DEPRECATED)
    output = mpfix("check", "pkg/train.py").output
    assert "MP307" in output and "MP306" not in output


def test_bad_config_is_a_clear_error(project: Path):
    write_config(project, 'keras = 4\n')
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "train.py")
    assert result.exit_code == 2
    assert "keras must be 2, 3" in result.output
    write_config(project, 'selct = ["MP1"]\n')
    result = mpfix("check", "train.py")
    assert result.exit_code == 2 and "unknown [tool.mpfix] keys: selct" in result.output
    write_config(project, 'select = ["MP9"]\n')
    assert "unknown rule code(s): MP9" in mpfix("check", "train.py").output


def test_load_reads_every_key(tmp_path: Path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.mpfix]\nselect = ["MP1", "MP2"]\nextend-select = ["MP306"]\nignore = ["MP205"]\n'
                    'exclude = ["x/*"]\nkeras = 2\npolicy = "mixed_float16"\nunsafe-fixes = true\nmax-file-size = 1000\n'
                    '[tool.mpfix.per-file-ignores]\n"tests/*" = ["MP1"]\n')
    settings = config.load(path)
    assert settings.select == ("MP1", "MP2") and settings.extend_select == ("MP306",)
    assert settings.ignore == ("MP205",) and settings.exclude == ("x/*",)
    assert settings.keras == "2" and settings.policy == "mixed_float16"
    assert settings.unsafe_fixes is True and settings.max_file_bytes == 1000
    assert settings.per_file_ignores == {"tests/*": ("MP1",)}


@pytest.mark.parametrize("comment", ["# noqa", "# noqa: MP306", "# NOQA:MP306,MP307", "# mpfix: ignore[MP306]", "# mpfix: ignore"])
def test_inline_suppression(project: Path, comment: str):
    source = DEPRECATED.replace("@tf.function(experimental_relax_shapes=True)",
                                f"@tf.function(experimental_relax_shapes=True)  {comment}")
    (project / "train.py").write_text(source)
    result = mpfix("check", "train.py")
    assert "MP306" not in result.output
    assert "MP307" in result.output


def test_suppression_of_another_code_does_not_hide(project: Path):
    source = DEPRECATED.replace("@tf.function(experimental_relax_shapes=True)",
                                "@tf.function(experimental_relax_shapes=True)  # noqa: MP201")
    (project / "train.py").write_text(source)
    assert "MP306" in mpfix("check", "train.py").output


def test_noqa_inside_a_string_does_not_suppress(project: Path):
    source = DEPRECATED.replace("@tf.function(experimental_relax_shapes=True)",
                                "@tf.function(experimental_relax_shapes=True, input_signature=None or '# noqa')")
    (project / "train.py").write_text(source)
    assert "MP306" in mpfix("check", "train.py").output


def test_file_level_suppression(project: Path):
    (project / "train.py").write_text("# mpfix: noqa: MP306\n" + DEPRECATED)
    output = mpfix("check", "train.py").output
    assert "MP306" not in output and "MP307" in output


def test_suppressed_findings_are_not_fixed(project: Path):
    source = DEPRECATED.replace("@tf.function(experimental_relax_shapes=True)",
                                "@tf.function(experimental_relax_shapes=True)  # noqa: MP306")
    path = project / "train.py"
    path.write_text(source)
    mpfix("apply", "train.py")
    assert "experimental_relax_shapes=True)  # noqa: MP306" in path.read_text()
    assert "run_functions_eagerly(True)" in path.read_text()


# A library layer with a float16 hazard; nothing in the project runs it under a mixed policy.
_LIBRARY_LAYER = """\
import tensorflow as tf


class Attention(tf.keras.layers.Layer):
    def call(self, scores, mask):
        scores += (1.0 - mask) * -1e9
        return tf.nn.softmax(scores)
"""


@pytest.mark.parametrize(("how", "flagged"), [("", False), ("config", True), ("flag", True)])
def test_a_configured_policy_makes_every_library_layer_float16_reachable(project: Path, how: str, flagged: bool):
    from mpfix import policy as policies

    write_config(project, 'policy = "mixed_float16"\n' if how == "config" else "")
    (project / "mylib").mkdir()
    (project / "mylib/__init__.py").write_text("")
    (project / "mylib/attention.py").write_text(_LIBRARY_LAYER)
    policies.project_reach.cache_clear()
    args = ["check", "--no-cache", *(["--policy", "mixed_float16"] if how == "flag" else []), "mylib"]
    assert ("MP201" in mpfix(*args).output) is flagged
    policies.project_reach.cache_clear()


# -- issue 20: typed values and the configuration closest to each file ------------------------------
@pytest.mark.parametrize(("body", "key"), [
    ('unsafe-fixes = "false"\n', "unsafe-fixes"),  # was read as true: apply wrote unsafe fixes
    ('unsafe-fixes = 1\n', "unsafe-fixes"),
    ('max-file-size = "big"\n', "max-file-size"),  # was a traceback and exit 1
    ('max-file-size = -1\n', "max-file-size"),  # was accepted
    ('max-file-size = 1.5\n', "max-file-size"),
    ('max-file-size = true\n', "max-file-size"),
    ('select = "MP1"\n', None),  # a single code as a string stays allowed (Ruff accepts a list only; harmless)
    ('select = [1]\n', "select"),
    ('exclude = "x/*"\n', "exclude"),
    ('policy = 16\n', "policy"),
    ('keras = true\n', "keras"),
    ('keras = 2.5\n', "keras"),
    ('[tool.mpfix.per-file-ignores]\n"a.py" = "MP1"\n', None),
    ('per-file-ignores = ["MP1"]\n', "per-file-ignores"),
])
def test_config_values_are_typed(project: Path, body: str, key: str | None):
    write_config(project, body)
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "train.py")
    if key is None:
        assert result.exit_code in (0, 1), result.output
        return
    assert result.exit_code == 2, result.output
    assert f"[tool.mpfix] {key}" in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_string_false_never_enables_unsafe_fixes(project: Path):
    write_config(project, 'unsafe-fixes = "false"\n')
    with pytest.raises(config.ConfigError, match=r"unsafe-fixes must be true or false, not 'false'"):
        config.load(project / "pyproject.toml")


def test_each_file_gets_the_configuration_closest_to_it(project: Path):
    # Ruff's rule: `sub/pyproject.toml` applies to sub/a.py whether `.` or `sub/a.py` is checked,
    # so a pre-commit run's results do not depend on which files are staged.
    write_config(project, "")
    (project / "sub").mkdir()
    (project / "sub" / "pyproject.toml").write_text("[tool.mpfix]\nignore = [\"MP306\"]\n")
    for name in ("top.py", "sub/a.py"):
        (project / name).write_text(DEPRECATED)
    alone = mpfix("check", "sub/a.py").output
    everything = mpfix("check", ".").output
    assert "MP307" in alone and "MP306" not in alone
    assert "sub/a.py:4:14: MP306" not in everything and "sub/a.py:9:1: MP307" in everything
    assert "top.py:4:14: MP306" in everything
    # An explicit --config applies to every file, as in Ruff.
    assert "sub/a.py:4:14: MP306" in mpfix("check", "--config", "pyproject.toml", ".").output
    # The command line still wins over each file's configuration.
    assert "sub/a.py:4:14: MP306" in mpfix("check", "--select", "MP306", "--ignore", "MP307", ".").output


def test_the_closest_configuration_decides_unsafe_fixes_per_file(project: Path):
    write_config(project, "unsafe-fixes = false\n")
    (project / "sub").mkdir()
    (project / "sub" / "pyproject.toml").write_text("[tool.mpfix]\nunsafe-fixes = true\nselect = [\"MP3\"]\n")
    assert config.settings_for_file(project / "sub" / "a.py").unsafe_fixes is True
    assert config.settings_for_file(project / "a.py").unsafe_fixes is False


def test_a_nearer_configurations_exclude_applies_to_its_folder(project: Path):
    # Ruff: the closest configuration's exclude decides, whether `.` or the folder is checked; its
    # globs are matched below that configuration's folder.
    import json

    write_config(project, "")
    (project / "sub" / "generated").mkdir(parents=True)
    (project / "sub" / "pyproject.toml").write_text('[tool.mpfix]\nexclude = ["generated/*", "skip_me.py"]\n')
    for name in ("top.py", "generated_top.py", "sub/a.py", "sub/skip_me.py", "sub/generated/model.py"):
        (project / name).write_text(DEPRECATED)
    everything = mpfix("check", ".").output
    alone = mpfix("check", "sub").output
    for output in (everything, alone):
        assert "sub/a.py:4:14: MP306" in output
        assert "generated/model.py" not in output and "skip_me.py" not in output
    assert "top.py:4:14: MP306" in everything and "generated_top.py:4:14: MP306" in everything
    # The excluded files are not counted as checked either.
    run = json.loads(mpfix("check", "--format", "json-run", ".").output)["run"]
    assert run["filesChecked"] == 3
    # Named explicitly, a file the nearer exclude matches is skipped too (as with the root's exclude).
    named = mpfix("check", "top.py", "sub/skip_me.py").output
    assert "top.py:4:14: MP306" in named and "skip_me.py" not in named
    # An explicit --config applies its own exclude (none) to every file.
    assert "sub/skip_me.py:4:14: MP306" in mpfix("check", "--config", "pyproject.toml", ".").output
