"""Structural parameter typing across files (``mpfix.project.structural``): research DELF's ``train_utils.py``
(N17, N18) and ``tuples_dataset.py`` (N21) read ``model.meta`` of a parameter nobody in the project passes; ``meta``
is assigned only by ``GlobalFeatureNet(tf.keras.Model)`` in another file. Each test is a small project on disk
checked through the runner, as ``mpfix check`` does."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.codemods import all_rules
from mpfix.engine import Options
from mpfix.project import facts as project_facts
from mpfix.project.crosscall_records import ArgKind, CallContext, CrossCall
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh  # noqa: F401  (fixture)

GLOBAL_MODEL = textwrap.dedent("""
    import tensorflow as tf

    from pkg.model import base


    class GlobalFeatureNet(base.RetrievalNet):
        def __init__(self, dim=2048):
            super().__init__()
            self.pool = tf.keras.layers.GlobalAveragePooling2D()
            self.meta = {"architecture": "ResNet101", "outputdim": dim}

        def call(self, x, training=False):
            return tf.math.l2_normalize(self.pool(self.backbone(x, training)), axis=-1)
""").lstrip("\n")

BASE = textwrap.dedent("""
    import tensorflow as tf


    class RetrievalNet(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.backbone = tf.keras.applications.ResNet50(include_top=False, weights=None)
""").lstrip("\n")

# N17: the training step of train_utils.py (no caller in the project passes `model`).
TRAIN_UTILS = textwrap.dedent("""
    import tensorflow as tf


    def _compute_loss_and_gradient(criterion, model, input, target, neg_num=5):
        with tf.GradientTape() as tape:
            descriptors = tf.Variable(tf.zeros(shape=(0, model.meta["outputdim"]), dtype=tf.float32))
            for img in input:
                o = model(tf.expand_dims(img, axis=0), training=True)
                descriptors = tf.concat([descriptors, o], 0)
            loss = criterion(descriptors, target)
        gradients = tape.gradient(loss, model.trainable_variables)
        return loss, gradients
""").lstrip("\n")
TRAIN_LINE = 9

# N21: tuples_dataset.py does not even import the model's module.
TUPLES = textwrap.dedent("""
    import tensorflow as tf


    def extract_descriptors_from_image_paths(net, image_paths, print_freq=10):
        loader = tf.data.Dataset.from_tensor_slices(image_paths).batch(1)
        vecs = tf.zeros((net.meta["outputdim"], 0))
        for i, input in enumerate(loader):
            o = net(input, training=False)
            o = tf.transpose(o, perm=[1, 0])
            vecs = tf.concat([vecs, o], 1)
        return vecs
""").lstrip("\n")
TUPLES_LINE = 10

ENTRY = textwrap.dedent("""
    import tensorflow as tf

    from pkg import train_utils
    from pkg.datasets import tuples

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
""").lstrip("\n")

PLAIN = textwrap.dedent("""
    class TuplesDataset:
        def __init__(self, name):
            self.meta = {"name": name, "outputdim": 0}

        def __call__(self, index):
            return self.meta, index
""").lstrip("\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'delf'\n")
    monkeypatch.chdir(tmp_path)
    files = {"pkg/__init__.py": "", "pkg/model/__init__.py": "", "pkg/model/base.py": BASE,
             "pkg/model/global_model.py": GLOBAL_MODEL, "pkg/train_utils.py": TRAIN_UTILS,
             "pkg/datasets/__init__.py": "", "pkg/datasets/tuples.py": TUPLES, "train.py": ENTRY}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _check(root: Path, *, cache: bool = False, **options) -> list[str]:
    job = Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(keras="3", **options), mode=Mode.CHECK)
    files = sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts)
    results = process_all(files, job, jobs=1, cache=cache)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings
                  if f.code == "MP206")


def test_a_parameter_only_another_file_s_keras_model_fits_is_that_model(project: Path):
    """N17 and N21: the float32 accumulators meet the model's float16 output (the model's class is in another file,
    a Keras model through the project's own base class)."""
    assert _check(project) == [f"pkg/datasets/tuples.py:{TUPLES_LINE}:MP206", f"pkg/train_utils.py:{TRAIN_LINE}:MP206"]
    calls = project_facts.file_facts(project / "pkg" / "datasets" / "tuples.py").cross_calls
    assert calls == (CrossCall("extract_descriptors_from_image_paths", CallContext.PLAIN,
                               (("net", ArgKind.KERAS_INSTANCE),)),)


def test_under_a_configured_policy_too(project: Path):
    (project / "train.py").write_text("import tensorflow as tf\n")
    assert _check(project) == []  # nothing sets a mixed policy: no float16 rule runs
    assert _check(project, policy="mixed_float16") == [f"pkg/datasets/tuples.py:{TUPLES_LINE}:MP206",
                                                       f"pkg/train_utils.py:{TRAIN_LINE}:MP206"]


def test_a_plain_class_in_a_third_file_with_the_same_attribute_withdraws_the_fact(project: Path):
    (project / "pkg" / "datasets" / "dataset.py").write_text(PLAIN)
    assert _check(project) == []
    assert project_facts.file_facts(project / "pkg" / "datasets" / "tuples.py").cross_calls == ()


def test_a_model_class_that_may_return_float32_gives_no_fact(project: Path):
    head = GLOBAL_MODEL.replace("return tf.math.l2_normalize(", "return tf.cast(tf.math.l2_normalize(").replace(
        "axis=-1)\n", "axis=-1), tf.float32)\n")
    (project / "pkg" / "model" / "global_model.py").write_text(head)
    assert _check(project) == []


def test_a_base_that_is_not_keras_gives_no_fact(project: Path):
    (project / "pkg" / "model" / "base.py").write_text(BASE.replace("(tf.keras.Model)", "(object)"))
    assert _check(project) == []


def test_another_file_gaining_the_attribute_invalidates_the_cached_result(project: Path):
    """The fact is in the cache key (``ProjectFileFacts.cross_calls``): tuples.py is untouched, a third file starts
    (then stops) defining ``meta`` on a plain class."""
    assert len(_check(project, cache=True)) == 2
    assert len(_check(project, cache=True)) == 2  # served from the cache
    dataset = project / "pkg" / "datasets" / "dataset.py"
    dataset.write_text(PLAIN)
    policies.forget_projects()
    assert _check(project, cache=True) == []
    dataset.write_text(PLAIN.replace("self.meta", "self.info"))
    policies.forget_projects()
    assert len(_check(project, cache=True)) == 2


def test_the_summary_s_cost_cuts_keep_its_answer():
    """``called=`` (the names the file's bytes call) and ``source=`` (a class's own lines for ``float32``) only skip
    work: the reads are the same; a class whose lines spell float32 is still seen to."""
    import ast

    from mpfix.project.structural import summarize

    data = (GLOBAL_MODEL + "\n\n" + TUPLES.split("\n", 2)[2] + "\n\nclass Head(tf.keras.layers.Layer):\n"
            "    def call(self, x):\n        return tf.cast(x, 'float32')\n").encode()
    tree = ast.parse(data)
    plain = summarize(tree, {"tf": "tensorflow"})
    cut = summarize(tree, {"tf": "tensorflow"}, called=frozenset({"net", "super", "enumerate"}), source=data)
    assert cut == plain
    assert dict(plain.reads)["extract_descriptors_from_image_paths"] == (("net", frozenset({"meta"})),)
    assert {c.name: c.spells_float32 for c in cut.classes} == {"GlobalFeatureNet": False, "Head": True}
    assert summarize(tree, {}, called=frozenset({"super"})).reads == ()


def test_a_plain_class_in_another_file_withdraws_the_in_file_fact_too(project: Path):
    """N15's shape (the function beside the model class): the file's own classes type ``net``; a plain class of
    another file assigning ``meta`` too makes the project's answer NOT_KERAS, and that answer wins."""
    extract = GLOBAL_MODEL.replace("(base.RetrievalNet)", "(tf.keras.Model)") + textwrap.dedent("""


        def extract_global_descriptors_from_list(net, images):
            descriptors = tf.zeros((0, net.meta["outputdim"]))
            for image in images:
                descriptors = tf.concat([descriptors, net(image)], 0)
            return descriptors
    """)
    (project / "pkg" / "model" / "global_model.py").write_text(extract)
    (project / "train.py").write_text(ENTRY.replace("from pkg.datasets import tuples", "from pkg.model import global_model"))
    assert "pkg/model/global_model.py:20:MP206" in _check(project)
    (project / "pkg" / "datasets" / "dataset.py").write_text(PLAIN)
    policies.forget_projects()
    assert [f for f in _check(project) if "global_model" in f] == []
    calls = project_facts.file_facts(project / "pkg" / "model" / "global_model.py").cross_calls
    assert calls == (CrossCall("extract_global_descriptors_from_list", CallContext.PLAIN,
                               (("net", ArgKind.NOT_KERAS),)),)


def test_a_subclass_in_a_file_that_only_mentions_the_attribute_is_still_a_rival(project: Path):
    """The project pass parses first the files that spell a read attribute where a class defines it, then the
    files that spell the name of a class that defines it (a subclass inherits it): this float32 subclass of
    the model spells ``meta`` only in its docstring, and still withdraws the fact."""
    (project / "pkg" / "model" / "head.py").write_text(textwrap.dedent("""
        import tensorflow as tf

        from pkg.model import global_model


        class Float32Net(global_model.GlobalFeatureNet):
            \"\"\"Same meta, float32 descriptors.\"\"\"

            def call(self, x, training=False):
                return tf.cast(super().call(x, training), tf.float32)
    """).lstrip("\n"))
    assert _check(project) == []


def test_where_a_class_may_define_a_name_is_read_from_the_bytes():
    from mpfix.project.structural_scan import _DEFINING, _spelling

    defining = {"method": b"class A:\n    async def  meta(self): ...\n", "self": b"self.meta = 1\n",
                "tuple": b"self.a, self . meta = 1, 2\n", "attr": b"    meta = {}\n", "annotated": b"    meta: dict\n",
                "parenthesised": b"(self.  # why\n   meta) = 1\n", "continued": b"def \\\n  meta(self):\n",
                "comment, CR": b"(meta  # c\r) = 1\n", "unicode": "x = 'ｍeta'\n".encode()}
    mentions = {"string": b"mode = 'meta'\n", "comment": b"# meta data\n", "compare": b"if meta == 1: pass\n",
                "longer": b"self.metadata = 1\nmeta_x = 2\n", "call": b"meta(1)\n"}
    assert sorted(_spelling({**defining, **mentions}, {"meta"}, _DEFINING, ascii_only=False)) == sorted(defining)
