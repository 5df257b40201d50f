"""Fix validation beyond compile(): no fix that leaves a name unbound or mixes dtypes is ever written."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from mpfix.codemods import Invalid, Rule, Valid
from mpfix.engine import Engine, Options
from mpfix.findings import FixSafety
from mpfix.fix_validation import Validator, undefined_names
from mpfix.runner import Job, Mode, process_file

# A Keras 3 backend-agnostic module: it never imports `tf`.
AGNOSTIC = """\
from keras import layers, ops


class RMSNorm(layers.Layer):
    def call(self, x):
        return x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + 1e-6)
"""


class _SpellsSquareWithTf(Rule):
    """Test-only rule: rewrites `ops.square(x)` as `tf.math.square(x)`, as a careless fix would."""

    code = "MP981"
    name = "spells-square-with-tf"
    message = "test rule"
    fix_safety = FixSafety.SAFE
    triggers = ("ops.square",)
    VALID: list[Valid] = []
    INVALID: list[Invalid] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.code(node.func) == "ops.square":
            self.report(node, fix={node: node.with_changes(func=cst.parse_expression("tf.math.square"))})


class _RenamesMean(Rule):
    """Test-only rule with a harmless fix, to show that good fixes in the same pass are kept."""

    code = "MP982"
    name = "renames-mean"
    message = "test rule"
    fix_safety = FixSafety.SAFE
    triggers = ("ops.mean",)
    VALID: list[Valid] = []
    INVALID: list[Invalid] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.code(node.func) == "ops.mean":
            self.report(node, fix={node: node.with_changes(func=cst.parse_expression("ops.average"))})


class _CastsToComputeDtype(Rule):
    """Test-only rule: casts a deliberate float32 value to the compute dtype (a float16/float32 mix)."""

    code = "MP983"
    name = "casts-to-compute-dtype"
    message = "test rule"
    fix_safety = FixSafety.SAFE
    triggers = ("ops.cast",)
    VALID: list[Valid] = []
    INVALID: list[Invalid] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.code(node.func) == "ops.cast" and len(node.args) == 2:
            dtype = node.args[1]
            if isinstance(dtype.value, cst.SimpleString):
                self.report(node, fix={dtype: dtype.with_changes(value=cst.parse_expression("self.compute_dtype"))})


def _lint(rules, text: str, **kwargs):
    return Engine(tuple(rules), Options(project_policy=False)).lint(text, Path("layers.py"), **kwargs)


def test_a_fix_that_uses_an_unimported_name_is_reported_without_a_fix():
    result = _lint([_SpellsSquareWithTf], AGNOSTIC, fix=True)
    assert not result.errors
    assert result.fixed_text is None and result.applied == 0
    (finding,) = result.findings
    assert finding.fix is None and finding.code == "MP981"
    assert "`tf`" in finding.message and "never defines or imports" in finding.message


def test_the_same_fix_is_kept_where_the_name_is_bound():
    text = "import tensorflow as tf\n" + AGNOSTIC
    result = _lint([_SpellsSquareWithTf], text, fix=True)
    assert result.fixed_text == text.replace("ops.square", "tf.math.square")


def test_good_fixes_of_the_same_pass_are_kept():
    result = _lint([_SpellsSquareWithTf, _RenamesMean], AGNOSTIC, fix=True)
    assert result.fixed_text == AGNOSTIC.replace("ops.mean", "ops.average")
    assert [(f.code, f.fix is None) for f in result.findings] == [("MP981", True)]


def test_names_the_original_already_left_undefined_do_not_block_a_fix():
    # A snippet that uses `tf` without importing it (e.g. a notebook cell after %run): not the fix's doing.
    text = AGNOSTIC + "\nprint(tf.__version__)\n"
    result = _lint([_SpellsSquareWithTf], text, fix=True)
    assert result.fixed_text == text.replace("ops.square", "tf.math.square")


def test_json_edits_leave_out_a_fix_that_fails_validation():
    result = _lint([_SpellsSquareWithTf], AGNOSTIC, edits=True)
    (finding,) = result.findings
    assert finding.fix is None and finding.edits == []


def test_apply_writes_nothing_for_a_rejected_fix(tmp_path: Path, monkeypatch):
    import mpfix.runner as runner

    path = tmp_path / "layers.py"
    path.write_text(AGNOSTIC)
    job = Job(rule_codes=("MP981",), options=Options(project_policy=False), mode=Mode.APPLY)
    monkeypatch.setattr(runner, "rules_for", lambda job: (_SpellsSquareWithTf,))
    monkeypatch.setattr(runner, "_ENGINES", {})
    result = process_file(path, job)
    assert not result.written and not result.errors
    assert path.read_text() == AGNOSTIC
    assert [f.fix for f in result.findings] == [None]


def test_a_fix_that_mixes_float16_with_float32_is_rejected_by_the_dtype_analysis():
    text = (
        "from keras import layers, ops\n\n\n"
        "class Rotary(layers.Layer):\n"
        "    def call(self, x):\n"
        '        idx = ops.arange(0, 8, 2, dtype="float32")\n'
        '        denom = ops.cast(8, "float32")\n'
        "        return idx / denom\n"
    )
    result = _lint([_CastsToComputeDtype], text, fix=True)
    assert result.fixed_text is None
    (finding,) = result.findings
    assert finding.fix is None and "mix dtypes" in finding.message and "idx / denom" in finding.message


def test_undefined_names_baseline():
    assert undefined_names("import os\nos.getcwd()\nprint(x)\n") == {"x"}
    assert undefined_names("def f(:\n") is None
    validator = Validator("import os\n", "m.py")
    assert validator.new_undefined("import os\ntf.cast(1, 'float32')\n") == {"tf"}
    assert validator.problem("import os\nos.sep\n") is None


# -- class 6: an inserted import never rebinds a name the file already binds ----------------------
COMPAT_V2 = """\
import tensorflow.compat.v2 as tf

tf.enable_v2_behavior()
opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)
"""


def test_a_fix_is_rejected_when_its_import_rebinds_a_name_the_file_binds():
    original = "import tensorflow.compat.v1 as tf\n\ntf.enable_v2_behavior()\n"
    fixed = "import tensorflow.compat.v1 as tf\nimport tensorflow as tf\n\ntf.enable_v2_behavior()\n"
    problem = Validator(original, "m.py").problem(fixed)
    assert problem is not None and "`tf`" in problem and "tensorflow.compat.v1" in problem
    # A name bound by an assignment or a def counts as well.
    assert Validator("tf = load()\n", "m.py").problem("import tensorflow as tf\ntf = load()\n") is not None
    assert Validator("def np():\n    pass\n", "m.py").problem("import numpy as np\ndef np():\n    pass\n")


def test_an_import_the_file_already_has_is_not_a_rebinding():
    original = "try:\n    import tensorflow as tf\nexcept ImportError:\n    tf = None\n"
    assert Validator(original, "m.py").problem("import tensorflow as tf\n" + original) is None
    assert Validator("import os\n", "m.py").problem("import os\nimport tensorflow as tf\n") is None


def test_add_imports_reuses_an_existing_binding_in_any_form():
    from mpfix.engine import add_imports

    for text in ("import numpy as np, tensorflow as tf\n\nx = 1\n",
                 "try:\n    import tensorflow as tf\nexcept ImportError:\n    pass\n",
                 "import tensorflow.compat.v2 as tf\n\ntf.enable_v2_behavior()\n"):
        module = cst.parse_module(text)
        assert add_imports(module, ["import tensorflow as tf"]).code == text


def test_mp305_on_a_compat_v2_file_keeps_its_tf():
    from mpfix.testing import fixed

    after = fixed(COMPAT_V2, "MP305", keras=3)
    assert after.count("import tensorflow") == 1 and "import tensorflow as tf" not in after
    assert "tf.keras.mixed_precision.LossScaleOptimizer(opt)" in after


def test_mp305_on_a_compat_v1_file_uses_a_name_that_is_free():
    from mpfix.testing import fixed

    text = COMPAT_V2.replace("compat.v2", "compat.v1")
    after = fixed(text, "MP305", keras=3)
    assert "import tensorflow as tf" not in after  # would break tf.enable_v2_behavior() on the next line
    assert after.startswith("import tensorflow.compat.v1 as tf\n")
    assert "import tensorflow\n" in after and "tensorflow.keras.mixed_precision.LossScaleOptimizer(opt)" in after
    compile(after, "fixed.py", "exec")


# -- paired edits: a fix never leaves half a migration of the loss-scaling calls --------------------
K2_STEP = """\
def train_step(opt, tape, loss, variables):
    with tape:
        scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, variables))
    opt.apply_gradients(zip(grads, variables))
"""


def test_a_fix_that_leaves_half_of_the_scaling_migration_is_rejected():
    validator = Validator(K2_STEP, "m.py")
    half = K2_STEP.replace("get_scaled_loss", "scale_loss")  # the rename without the unscale's drop
    problem = validator.problem(half)
    assert problem is not None and "`opt`" in problem and "Keras 2 and Keras 3" in problem
    whole = half.replace("opt.get_unscaled_gradients(tape.gradient(scaled, variables))",
                         "tape.gradient(scaled, variables)")
    assert validator.problem(whole) is None
    # A file that already mixed them (two optimizers of two generations) is not the fix's doing.
    assert Validator(half, "m.py").problem(half + "\n") is None
