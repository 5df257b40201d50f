"""Issue 20 class 2: code under a TensorFlow version guard is never rewritten to the other API.

Each guarded snippet below is right on the versions its branch runs on; the same code without the
guard is a finding with a fix (the control), so every test can fail.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods.analysis.version_guards import Side, VersionGuards
from mpfix.codemods.names import ImportTable
from mpfix.testing import lint_snippet

OLD_CALL = 'mixed_precision.experimental.set_policy("mixed_float16")'
NEW_CALL = 'mixed_precision.set_global_policy("mixed_float16")'
HEADER = "import tensorflow as tf\nfrom packaging import version\nfrom distutils.version import LooseVersion\n" \
         "from tensorflow.keras import mixed_precision\n"

GUARDED_OLD = {
    "packaging": f'if version.parse(tf.__version__) < version.parse("2.4"):\n    {OLD_CALL}\nelse:\n    {NEW_CALL}\n',
    "loose_version_else": f'if LooseVersion(tf.__version__) >= LooseVersion("2.4"):\n    {NEW_CALL}\nelse:\n    {OLD_CALL}\n',
    "reversed_operands": f'if version.parse("2.4") > version.parse(tf.__version__):\n    {OLD_CALL}\n',
    "startswith": f'if tf.__version__.startswith("2.2"):\n    {OLD_CALL}\n',
    "tuple_map_int": f'if tuple(map(int, tf.__version__.split(".")[:2])) < (2, 4):\n    {OLD_CALL}\n',
    "int_minor": f'if int(tf.__version__.split(".")[1]) < 4:\n    {OLD_CALL}\n',
    "tf_version_VERSION": f'if tf.version.VERSION < "2.4":\n    {OLD_CALL}\n',
    "hasattr": f'if hasattr(mixed_precision, "experimental"):\n    {OLD_CALL}\nelse:\n    {NEW_CALL}\n',
    "not_hasattr_else": f'if not hasattr(mixed_precision, "experimental"):\n    {NEW_CALL}\nelse:\n    {OLD_CALL}\n',
    "module_version_name": f'TF_VERSION = version.parse(tf.__version__)\n\nif TF_VERSION < version.parse("2.4"):\n'
                           f'    {OLD_CALL}\n',
    "module_flag": f'OLD_TF = version.parse(tf.__version__) < version.parse("2.4")\n\nif OLD_TF:\n    {OLD_CALL}\n',
    "try_except": f'try:\n    {NEW_CALL}\nexcept (AttributeError, ImportError):\n    {OLD_CALL}\n',
    "early_return": f'def setup():\n    if hasattr(mixed_precision, "set_global_policy"):\n        {NEW_CALL}\n'
                    f'        return\n    {OLD_CALL}\n',
    "conditional_expression": f'p = mixed_precision.experimental.Policy("mixed_float16") if '
                              f'version.parse(tf.__version__) < version.parse("2.4") else None\n',
    "in_a_function": f'def setup():\n    if version.parse(tf.__version__) < version.parse("2.4"):\n        {OLD_CALL}\n',
}


def _codes(code: str, keras: int = 3, **kwargs):
    return lint_snippet(code, ("MP3",), keras=keras, **kwargs)


def test_the_control_without_a_guard_is_a_finding_with_a_fix():
    result = _codes(HEADER + OLD_CALL + "\n")
    assert [f.code for f in result.findings] == ["MP301"] and result.findings[0].fix is not None
    policy = _codes(HEADER + 'p = mixed_precision.experimental.Policy("mixed_float16")\n')
    assert [f.code for f in policy.findings] == ["MP301"]


@pytest.mark.parametrize("name", sorted(GUARDED_OLD))
def test_the_old_branch_of_a_version_guard_is_left_alone(name: str):
    result = _codes(HEADER + GUARDED_OLD[name])
    assert [f.code for f in result.findings] == [], [f.message for f in result.findings]


def test_old_api_in_the_branch_for_new_versions_is_reported_without_a_fix():
    result = _codes(HEADER + f'if version.parse(tf.__version__) >= version.parse("2.9"):\n    {OLD_CALL}\n')
    (finding,) = result.findings
    assert finding.code == "MP301" and finding.fix is None and "version" in finding.message


def test_a_try_that_wraps_a_program_or_only_exits_is_no_guard():
    exits = f"import sys\ntry:\n    {OLD_CALL}\nexcept ImportError:\n    sys.exit(1)\n"
    assert [f.code for f in _codes(HEADER + exits).findings] == ["MP301"]
    long_body = "try:\n" + "    x = 1\n" * 8 + f"    {OLD_CALL}\nexcept ImportError:\n    x = 2\n"
    assert [f.code for f in _codes(HEADER + long_body).findings] == ["MP301"]


def test_a_guard_on_another_librarys_version_is_no_guard():
    code = HEADER + f'import numpy as np\nif version.parse(np.__version__) < version.parse("1.20"):\n    {OLD_CALL}\n'
    assert [f.code for f in _codes(code).findings] == ["MP301"]


def test_mp303_keras2_scaling_in_the_branch_for_keras2_is_left_alone():
    code = """
        import tensorflow as tf
        from packaging import version

        def train_step(opt, model, x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                if version.parse(tf.__version__) < version.parse("2.16"):
                    scaled = opt.get_scaled_loss(loss)
                else:
                    scaled = opt.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            if version.parse(tf.__version__) < version.parse("2.16"):
                grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, model.trainable_variables))
    """
    assert [f.code for f in _codes(code, keras=3).findings] == []
    # On Keras 2 the `scale_loss` branch is the new version's: reported at most, never rewritten.
    assert all(f.fix is None for f in _codes(code, keras=2).findings)


def test_guard_of_answers_with_the_innermost_branch_and_its_side():
    text = HEADER + textwrap.dedent("""
        if version.parse(tf.__version__) < version.parse("2.4"):
            a = 1
        else:
            b = 2
        c = 3
    """)
    module = cst.parse_module(text)
    imports = ImportTable(module)
    guards = VersionGuards(module, imports.resolve)
    names = {n.value: n for n in _names(module)}
    assert guards.guard_of(names["a"]).side is Side.OLD
    assert guards.guard_of(names["b"]).side is Side.NEW
    assert guards.guard_of(names["c"]) is None


def _names(module: cst.Module) -> list[cst.Name]:
    found: list[cst.Name] = []

    class _V(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    module.visit(_V())
    return found
