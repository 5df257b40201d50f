"""Float16 reachability by entry points, on small throwaway projects (no TensorFlow, no parse)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.project.entries import entries_in
from mpfix.project.reachability import reach_in_text, scan_project
from mpfix.discovery import discover
from mpfix.engine import Engine, Options
from mpfix.policy import Policy

SETS = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
LAYER = "import tensorflow as tf\n\nclass Block(tf.keras.layers.Layer):\n    def call(self, x):\n        return x\n"


def _project(root: Path, files: dict[str, str]):
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    reach = scan_project(root, list(discover([root])))
    return lambda name: reach.reach_for(root / name)


def test_a_conftest_fixture_reaches_only_the_tests_that_take_it(tmp_path: Path):
    reach = _project(tmp_path, {
        "mylib/__init__.py": "",
        "mylib/layers.py": LAYER,
        "mylib/io.py": LAYER,
        "tests/conftest.py": """
            import keras
            import pytest

            @pytest.fixture(params=["float32", "mixed_float16"])
            def dtype_policy(request):
                keras.mixed_precision.set_global_policy(request.param)
                yield request.param
                keras.mixed_precision.set_global_policy("float32")
        """,
        "tests/test_layers.py": """
            from mylib.layers import Block

            def test_block(dtype_policy):
                Block()
        """,
        "tests/test_io.py": "from mylib import io\n\ndef test_plain():\n    io.Block()\n",
        "tutorials/walkthrough.py": "from mylib import io, layers\nio.Block()\n",
        "scripts/train.py": "from mylib.io import Block\nBlock()\n",
    })
    assert reach("tests/test_layers.py").policy is Policy.FLOAT16
    assert "fixture `dtype_policy`" in reach("tests/test_layers.py").why
    assert "tests/conftest.py:4" in reach("tests/test_layers.py").why
    # The library's own test runs this layer under the policy; nothing runs mylib/io.py so.
    assert reach("mylib/layers.py").policy is Policy.FLOAT16
    assert "tests/test_layers.py" in reach("mylib/layers.py").why
    for name in ("mylib/io.py", "tests/test_io.py", "tutorials/walkthrough.py", "scripts/train.py"):
        assert reach(name).policy is Policy.NONE, (name, reach(name).why)
    # Resetting the policy to float32 in the fixture is no entry point either.
    assert all(e.scope == "fixture" for e in entries_in((tmp_path / "tests/conftest.py").read_bytes()))


def test_a_fixture_imported_into_a_conftest_reaches_the_tests_under_it(tmp_path: Path):
    reach = _project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/utils/__init__.py": "",
        "pkg/utils/test_utils.py": """
            import pytest
            import tensorflow as tf

            @pytest.fixture(scope="function", params=["float32", "mixed_float16"])
            def run_with_mixed_precision_policy(request):
                tf.keras.mixed_precision.set_global_policy(request.param)
                yield
        """,
        "pkg/conftest.py": "from pkg.utils.test_utils import run_with_mixed_precision_policy  # noqa: F401\n",
        "pkg/layers/__init__.py": "",
        "pkg/layers/crf.py": LAYER,
        "pkg/layers/tests/__init__.py": "",
        "pkg/layers/tests/crf_test.py": """
            import pytest
            from pkg.layers.crf import Block

            @pytest.mark.usefixtures("run_with_mixed_precision_policy")
            def test_crf():
                Block()
        """,
        "pkg/layers/tests/other_test.py": "def test_other():\n    pass\n",
    })
    assert reach("pkg/layers/tests/crf_test.py").policy is Policy.FLOAT16
    assert reach("pkg/layers/crf.py").policy is Policy.FLOAT16
    assert reach("pkg/layers/tests/other_test.py").policy is Policy.NONE


def test_parametrize_reaches_its_test_module_and_what_it_runs_not_other_tests(tmp_path: Path):
    reach = _project(tmp_path, {
        "lib/__init__.py": "",
        "lib/model.py": LAYER,
        "lib/data.py": "import json\n",
        "tests/test_model.py": """
            import pytest
            from lib import model

            @pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
            def test_model(policy):
                model.Block(dtype=policy)
        """,
        "tests/test_data.py": "from lib import data\n\ndef test_data():\n    pass\n",
        "tests/helpers.py": "def make():\n    pass\n",
    })
    assert reach("tests/test_model.py").policy is Policy.FLOAT16
    assert reach("lib/model.py").policy is Policy.FLOAT16
    for name in ("lib/data.py", "tests/test_data.py", "tests/helpers.py"):
        assert reach(name).policy is Policy.NONE, name


@pytest.mark.parametrize(("option", "expected"), [("True", Policy.FLOAT16), ("False", Policy.NONE)])
def test_grappler_option_is_an_entry_point(tmp_path: Path, option: str, expected: Policy):
    reach = _project(tmp_path, {
        "train.py": f"""
            import tensorflow as tf
            from model import net

            tf.config.optimizer.set_experimental_options({{"auto_mixed_precision": {option}}})
            net.build()
        """,
        "model/net.py": LAYER,
    })
    assert reach("train.py").policy is expected
    assert reach("model/net.py").policy is expected
    if expected is Policy.FLOAT16:
        assert "auto_mixed_precision" in reach("model/net.py").why and "train.py" in reach("model/net.py").why


@pytest.mark.parametrize(("assignment", "expected"), [
    ('os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "0"', Policy.NONE),
    ("os.environ['TF_ENABLE_AUTO_MIXED_PRECISION'] = 'false'", Policy.NONE),
    ('flag = os.environ.get("TF_ENABLE_AUTO_MIXED_PRECISION", "1")', Policy.NONE),
    ('os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"', Policy.FLOAT16),
    ('os.environ.setdefault("TF_ENABLE_AUTO_MIXED_PRECISION", "true")', Policy.FLOAT16),
    ('os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1" if args.amp else "0"', Policy.FLOAT16),
])
def test_env_switch_counts_only_when_true(tmp_path: Path, assignment: str, expected: Policy):
    reach = _project(tmp_path, {"run.py": f"import os\nimport helpers\n{assignment}\n", "helpers.py": LAYER})
    assert reach("run.py").policy is expected
    assert reach("helpers.py").policy is expected


def test_imports_are_followed_transitively_within_the_project(tmp_path: Path):
    reach = _project(tmp_path, {
        "main.py": SETS + "import pkg.b\n",
        "pkg/__init__.py": "",
        "pkg/b.py": "from . import c\n",
        "pkg/c.py": "from .sub import d\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/d.py": LAYER,
        "pkg/unused.py": LAYER,
        "other.py": "import pkg.unused\n",
    })
    for name in ("main.py", "pkg/__init__.py", "pkg/b.py", "pkg/c.py", "pkg/sub/__init__.py", "pkg/sub/d.py"):
        assert reach(name).policy is Policy.FLOAT16, name
    assert reach("main.py").why.startswith("entry point")
    why = reach("pkg/sub/d.py").why
    assert "imported from main.py" in why and "pkg/b.py → pkg/c.py" in why
    assert reach("pkg/unused.py").policy is Policy.NONE
    assert reach("other.py").policy is Policy.NONE
    assert "main.py:2" in reach("other.py").why  # names the entry points that exist


def test_examples_that_set_the_policy_make_the_library_they_import_reachable(tmp_path: Path):
    reach = _project(tmp_path, {
        "src/mylib/__init__.py": "",
        "src/mylib/models.py": "from mylib.layers import Block\n",
        "src/mylib/layers.py": LAYER,
        "src/mylib/io.py": "import json\n",
        "examples/train_mixed.py": """
            import keras
            from mylib.models import Block

            keras.mixed_precision.set_global_policy("mixed_float16")
            Block()
        """,
    })
    for name in ("src/mylib/models.py", "src/mylib/layers.py", "src/mylib/__init__.py"):
        assert reach(name).policy is Policy.FLOAT16, name
    assert "examples/train_mixed.py" in reach("src/mylib/layers.py").why
    assert reach("src/mylib/io.py").policy is Policy.NONE


def test_a_project_function_that_sets_the_policy_makes_its_callers_entry_points(tmp_path: Path):
    reach = _project(tmp_path, {
        "lib/__init__.py": "",
        "lib/performance.py": """
            import tensorflow as tf

            def set_mixed_precision_policy(dtype):
                if dtype == "float16":
                    tf.keras.mixed_precision.set_global_policy("mixed_float16")
        """,
        "lib/model.py": LAYER,
        "lib/unrelated.py": LAYER,
        "train.py": """
            from lib import model, performance

            def main(cfg):
                performance.set_mixed_precision_policy(cfg.dtype)
                model.Block()
        """,
    })
    assert reach("lib/model.py").policy is Policy.FLOAT16
    assert "set_mixed_precision_policy()" in reach("lib/model.py").why
    assert reach("lib/unrelated.py").policy is Policy.NONE


@pytest.mark.parametrize("mention", [
    'if layer.dtype_policy.name == "mixed_float16":\n    pass\n',
    'if policy in ("mixed_float16", "mixed_bfloat16"):\n    pass\n',
    'NAMES = {"mixed_float16": 16}\n',
    '# set_global_policy("mixed_float16") before building\n',
    'def f():\n    """Works under "mixed_float16" too."""\n',
    'raise ValueError("enable_mixed_precision_graph_rewrite() is on; turn it off")\n',
])
def test_mentions_that_set_nothing_are_not_entry_points(mention: str):
    assert entries_in(mention.encode()) == []
    assert reach_in_text(mention).policy is Policy.NONE


def test_a_docstring_example_that_sets_the_policy_is_documentation_that_counts():
    text = 'def f():\n    """Example:\n\n    >>> keras.mixed_precision.set_global_policy("mixed_float16")\n    """\n'
    (entry,) = entries_in(text.encode())
    assert entry.scope == "global" and entry.line == 4


@pytest.mark.parametrize("setter", [
    'keras.mixed_precision.set_global_policy("mixed_float16")',
    'policy = tf.keras.mixed_precision.Policy("mixed_float16")',
    'layer = keras.layers.Dense(4, dtype="mixed_float16")',
    'config = {"policy": "mixed_float16"}',
    'parser.add_argument("--dtype", default="mixed_bfloat16")',
])
def test_policy_setters_are_entry_points(setter: str):
    found = entries_in(setter.encode())
    assert len(found) == 1 and found[0].scope == "global"
    assert found[0].policy is (Policy.BFLOAT16 if "bfloat16" in setter else Policy.FLOAT16)


def test_configured_policy_decides_for_every_file(tmp_path: Path):
    _project(tmp_path, {"lib.py": LAYER})
    reach = policies.reach_for(tmp_path / "lib.py", LAYER, configured="mixed_float16")
    assert reach.policy is Policy.FLOAT16 and "configured" in reach.why
    assert policies.reach_for(tmp_path / "lib.py", SETS, configured="float32").policy is Policy.NONE


def test_the_engine_and_the_cache_key_follow_the_file_not_the_project(tmp_path: Path):
    from mpfix import cache as cache_mod
    from mpfix.runner import Job, Mode

    from mpfix.codemods import all_rules

    # A float16-only rule's own example: its triggers put the file's policy into its cache key.
    rule, text = next((r, e.code) for r in all_rules() if r.requires_float16
                      for e in r.INVALID if e.policy == "mixed_float16" and "mixed_" not in e.code)
    _project(tmp_path, {"train.py": SETS, "model/layers.py": text})
    layers = tmp_path / "model/layers.py"
    engine = Engine((), Options())
    policies.project_reach.cache_clear()
    assert engine.reach(text, layers).policy is Policy.NONE  # the project has float16, this file does not
    job = Job(rule_codes=(rule.code,), options=Options(), mode=Mode.CHECK)
    before = cache_mod._keyer_for(job).key(layers, text.encode())

    (tmp_path / "train.py").write_text(SETS + "from model import layers\n")
    policies.project_reach.cache_clear()  # a new process
    assert engine.reach(text, layers).policy is Policy.FLOAT16
    assert "train.py" in engine.reach(text, layers).why
    after = cache_mod._keyer_for(job).key(layers, text.encode())
    assert before != after
    policies.project_reach.cache_clear()


def test_verbose_says_which_files_run_under_the_policy_and_why(project: Path):
    from click.testing import CliRunner

    from mpfix.cli import cli

    (project / "model").mkdir()
    (project / "model/layers.py").write_text(LAYER)
    (project / "train.py").write_text(SETS + "from model import layers\n")
    (project / "tools.py").write_text("import os\n")
    policies.project_reach.cache_clear()
    result = CliRunner().invoke(cli, ["check", "--no-cache", "--verbose", "."])
    assert "2 of 3 files run under a mixed policy" in result.stderr
    assert 'model/layers.py: mixed_float16 — imported from train.py, which sets "mixed_float16" (line 2)' in result.stderr
    assert "1 file with no mixed policy: no float16 entry point of the project reaches it" in result.stderr
    policies.project_reach.cache_clear()


MIXED_TEST = '''\
import tensorflow as tf


class AttentionA(tf.keras.layers.Layer):
    def call(self, scores, mask):
        scores += (1.0 - mask) * -1e9
        return tf.nn.softmax(scores)


class AttentionB(tf.keras.layers.Layer):
    def call(self, scores, mask):
        scores += (1.0 - mask) * -1e9
        return tf.nn.softmax(scores)


def test_float16():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    AttentionA()


def test_float32():
    AttentionB()
'''


def test_a_policy_set_inside_one_test_reaches_that_test_and_its_helpers_only(tmp_path: Path):
    from mpfix.project.fixture_regions import float16_regions

    reach = _project(tmp_path, {"tests/test_attention.py": MIXED_TEST})
    found = reach("tests/test_attention.py")
    assert found.policy is Policy.FLOAT16 and found.partial and "only its tests" in found.why
    assert float16_regions(MIXED_TEST, ()) == [(4, 7), (16, 18)]  # AttentionA (used by the test), test_float16
    engine = Engine(tuple(r for r in __import__("mpfix.codemods", fromlist=["x"]).all_rules() if r.code == "MP201"),
                    Options())
    policies.project_reach.cache_clear()
    result = engine.lint(MIXED_TEST, tmp_path / "tests/test_attention.py")
    assert [(f.code, f.line) for f in result.findings] == [("MP201", 6)]
    policies.project_reach.cache_clear()


def test_a_fixture_reaches_the_tests_that_take_it_within_a_module(tmp_path: Path):
    from mpfix.project.fixture_regions import float16_regions

    text = MIXED_TEST.replace('    tf.keras.mixed_precision.set_global_policy("mixed_float16")\n', "").replace(
        "def test_float16():", "def test_float16(dtype_policy):")
    assert float16_regions(text, ("dtype_policy",)) == [(4, 7), (16, 17)]
    with_marker = text.replace("def test_float16(dtype_policy):",
                               '@pytest.mark.usefixtures("dtype_policy")\ndef test_float16():')
    assert float16_regions(with_marker, ("dtype_policy",)) == [(4, 7), (16, 18)]


def test_the_scan_is_kept_in_the_cache_folder_and_redone_when_a_file_changes(tmp_path: Path, monkeypatch):
    from mpfix.project import reachability

    root = tmp_path / "proj"
    root.mkdir()
    _project(root, {"train.py": SETS + "from model import layers\n", "model/layers.py": LAYER})
    scans = []
    real = reachability.scan_project
    monkeypatch.setattr(reachability, "scan_project", lambda *args: scans.append(args) or real(*args))
    policies.use_store(tmp_path / "store")
    try:
        for expected_scans in (1, 1):  # a second process reads the stored scan
            policies.project_reach.cache_clear()
            reach = policies.project_reach(root.resolve()).reach_for(root / "model/layers.py")
            assert reach.policy is Policy.FLOAT16 and "train.py" in reach.why
            assert len(scans) == expected_scans
        (root / "train.py").write_text(SETS)  # no longer imports the layer
        policies.project_reach.cache_clear()
        assert policies.project_reach(root.resolve()).reach_for(root / "model/layers.py").policy is Policy.NONE
        assert len(scans) == 2
    finally:
        policies.use_store(None)
        policies.project_reach.cache_clear()


def test_a_relative_path_finds_the_root_of_the_current_folder(tmp_path: Path, monkeypatch):
    # The project root was cached by the relative folder ("." for `train.py`): once the working
    # directory changed (one test after another, a long-lived server) it named the old project.
    for name, line in (("one", 2), ("two", 3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
        (tmp_path / name / "train.py").write_text("\n" * (line - 2) + SETS)
    policies.project_reach.cache_clear()
    for name, line in (("one", 2), ("two", 3), ("one", 2)):
        monkeypatch.chdir(tmp_path / name)
        assert policies.project_root(Path("train.py")) == (tmp_path / name).resolve()
        assert policies.reach_for(Path("train.py")).why == f'entry point: sets "mixed_float16" (line {line})'
    policies.project_reach.cache_clear()


def test_forget_projects_sees_files_created_since(tmp_path: Path):
    # A long-lived process (the LSP server) lints again after a save: a new project root, a newly
    # pinned TensorFlow and a newly set policy must all count.
    from mpfix import declared, target

    (tmp_path / ".git").mkdir()
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "train.py").write_text("import tensorflow as tf\n")
    assert policies.project_root(sub / "train.py") == tmp_path.resolve()
    assert policies.project_reach(tmp_path.resolve()).policy is Policy.NONE
    before = declared.target_for(sub / "train.py")

    (sub / "pyproject.toml").write_text("[project]\nname = 'x'\ndependencies = ['tensorflow==2.15.*']\n")
    (sub / "train.py").write_text(SETS)
    assert policies.project_root(sub / "train.py") == tmp_path.resolve()  # still remembered
    policies.forget_projects()
    assert policies.project_root(sub / "train.py") == sub.resolve()
    assert policies.project_reach(sub.resolve()).policy is Policy.FLOAT16
    after = declared.target_for(sub / "train.py")
    assert after is not None and after.keras == target.KERAS2, (before, after)


# -- policies set in called functions (issue 18; judge-classes C8) ---------------------------------
GET_PRECISION = """
    def get_precision(strategy, mixed_precision):
        if mixed_precision:
            if strategy == "tpu":
                return "mixed_bfloat16"
            return "mixed_float16"
        return "float32"
"""

TRAIN_WITH_PRECISION = """
    import tensorflow as tf

    import model_lib
    import utils


    def main(config):
        precision = utils.get_precision(config.strategy, config.mixed_precision)
        tf.keras.mixed_precision.set_global_policy(tf.keras.mixed_precision.Policy(precision))
        model = model_lib.build(10)
"""


def test_a_policy_name_returned_by_a_project_function_reaches_its_callers_float16_first(tmp_path: Path):
    """efficientdet's utils.get_precision returns "mixed_bfloat16" on TPU and "mixed_float16" else: the
    caller and what it imports run under float16 somewhere, so float16 wins (it was bfloat16: the
    first return found)."""
    reach = _project(tmp_path, {"utils.py": GET_PRECISION, "train.py": TRAIN_WITH_PRECISION, "model_lib.py": LAYER})
    for name in ("train.py", "model_lib.py"):
        found = reach(name)
        assert found.policy is Policy.FLOAT16, (name, found)
        assert "get_precision()" in found.why


def test_a_policy_set_inside_a_function_an_entry_point_imports_and_calls(tmp_path: Path):
    setup = """
        import keras


        def configure(precision):
            if precision == "mixed":
                keras.mixed_precision.set_global_policy("mixed_float16")
    """
    train = "from setup_utils import configure\nimport layers\n\nconfigure('mixed')\n"
    reach = _project(tmp_path, {"setup_utils.py": setup, "train.py": train, "layers.py": LAYER,
                                "unused.py": LAYER})
    assert reach("train.py").policy is Policy.FLOAT16
    assert reach("layers.py").policy is Policy.FLOAT16
    assert reach("unused.py").policy is Policy.NONE


def test_absolute_imports_through_a_namespace_package_from_the_project_root(tmp_path: Path):
    """tensorflow/examples: the root and `tensorflow_examples/` are packages, `third_party/` is a namespace
    package (no __init__.py), and the driver imports `tensorflow_examples.lite.third_party.efficientdet.utils`
    by its path from the root. The driver calls get_precision() of that module, so it and the layers it
    imports run under float16 (they were unreached: the dotted names started at `efficientdet`)."""
    base = "tensorflow_examples/lite/third_party/efficientdet"
    package = base.replace("/", ".")
    reach = _project(tmp_path, {
        "__init__.py": "",
        "tensorflow_examples/__init__.py": "",
        "tensorflow_examples/lite/__init__.py": "",
        f"{base}/__init__.py": "",
        f"{base}/utils.py": GET_PRECISION,
        f"{base}/keras/__init__.py": "",
        f"{base}/keras/efficientdet_keras.py": LAYER,
        f"{base}/keras/train.py": f"""
            import tensorflow as tf
            from {package} import utils
            from {package}.keras import efficientdet_keras

            precision = utils.get_precision("gpu", True)
            tf.keras.mixed_precision.set_global_policy(tf.keras.mixed_precision.Policy(precision))
        """,
        f"{base}/keras/unused.py": LAYER,
    })
    assert reach(f"{base}/keras/train.py").policy is Policy.FLOAT16
    assert "get_precision()" in reach(f"{base}/keras/train.py").why
    assert reach(f"{base}/keras/efficientdet_keras.py").policy is Policy.FLOAT16
    assert reach(f"{base}/keras/unused.py").policy is Policy.NONE
