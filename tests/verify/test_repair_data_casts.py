"""``mpfix repair`` on data the script casts to float16 itself (a ``tf.data`` map): the edit, and
one real repair on TensorFlow (CPU), where the float32 baseline fails too."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix.verify import data_casts
from verify_helpers import repair_copy

REPAIR = Path(__file__).parent / "scripts" / "repair"


def test_each_float16_cast_of_a_line_is_a_site_in_source_order():
    text = "def f(x, y):\n    return tf.cast(x, tf.float16), ops.cast(y, dtype='half'), tf.cast(y, tf.float32)\n"
    assert data_casts.sites(text, 2) == ["tf.cast(x, tf.float16)", "ops.cast(y, dtype='half')"]
    assert data_casts.sites(text, 1) == []


def test_the_edit_writes_float32_in_the_casts_own_spelling():
    text = "a = tf.cast(x, tf.float16); b = keras.ops.cast(y, dtype=\"float16\"); c = tf.cast(z, tf.half)\n"
    assert data_casts.to_float32(text, 1, 0) == text.replace("tf.float16", "tf.float32")
    assert data_casts.to_float32(text, 1, 1) == text.replace('"float16"', '"float32"')
    assert data_casts.to_float32(text, 1, 2) == text.replace("tf.half", "tf.float32")
    assert data_casts.to_float32(text, 1, 3) is None
    image = "img = tf.image.convert_image_dtype(img, np.float16)\n"
    assert data_casts.to_float32(image, 1, 0) == "img = tf.image.convert_image_dtype(img, np.float32)\n"


def test_no_edit_where_no_cast_names_float16():
    for text in ("a = tf.cast(x, tf.float32)\n", "a = tf.cast(x, 'int32')\n", "a = tf.cast(x)\n", "a = cast(\n"):
        assert data_casts.sites(text, 1) == [] and data_casts.to_float32(text, 1, 0) is None
    # A dtype the source does not spell (a name, the policy's compute dtype) is a site: sites are asked only for
    # lines where the run saw a cast make float16 (turn 17's pipeline_energy, test_repair_turn17.py).
    assert data_casts.to_float32("a = tf.cast(x, dtype)\n", 1, 0) == 'a = tf.cast(x, "float32")\n'


@pytest.mark.slow
def test_repair_keeps_the_prices_the_pipeline_casts_to_float16_in_float32(tmp_path):
    run = repair_copy(tmp_path, REPAIR / "half_prices.py", steps=6, timeout=900)
    result, data = run.result, run.report
    assert result.returncode == 0, result.stdout + result.stderr
    assert "half_prices.py: non-finite -> healthy (exit 0)" in result.stdout
    # Only the price's cast changes: the features' cast on the same line was tried and not kept.
    assert run.after == run.before.replace("tf.cast(price, tf.float16)", "tf.cast(price, tf.float32)")
    assert [c["kind"] for c in data["changes"]] == ["float32 data"]
    assert data["changes"][0]["line"] == 11
    assert "the input pipeline casts float32 data to float16 (`to_half`)" in data["changes"][0]["evidence"]
    assert not any("float32 run changed" in n for n in data.get("notes", [])), data.get("notes")


def test_a_float32_run_may_change_only_when_the_scripts_own_float16_data_broke_it():
    from pathlib import Path as P

    from mpfix.verify.changes import Change, ChangeKind
    from mpfix.verify.records import RunResult, Step
    from mpfix.verify.repair_checks import float32_repaired

    def run(losses, act=None):
        return RunResult("float32", end={"event": "end", "status": "finished"}, returncode=0,
                         layers={0: {"name": "mae targets"}},
                         steps=[Step(i, x, 1.0, False, False, 0.0, 0.0, 1.0, act_max=act, act_layer=0 if act else None)
                                for i, x in enumerate(losses)])

    inf = float("inf")
    data = [Change(ChangeKind.DATA_CAST, P("a.py"), "", "")]
    island = [Change(ChangeKind.ISLAND, P("a.py"), "", "")]
    own = run([inf], act=inf)  # its float16 targets were inf: the script's own cast
    assert float32_repaired(run([2.0, 1.9, 1.8]), own, data)
    assert not float32_repaired(run([2.0, 1.9, 1.8]), own, island)  # another kind of change: float32 must not move
    assert not float32_repaired(run([2.0, inf]), own, data)  # still non-finite
    assert not float32_repaired(run([2.0, 1.9]), run([inf]), data)  # float32 data broken by itself
    assert not float32_repaired(run([2.0, 1.9]), run([2.0, 1.9]), data)  # nothing was broken


def test_every_cast_the_ops_table_knows_is_a_site():
    """The casts are the table's (codemods/facts/ops.py), not a list of repair's own: saturate_cast too."""
    text = "a = tf.dtypes.saturate_cast(x, tf.float16); b = tf.cast(y, 'float16'); c = tf.round(z)\n"
    assert data_casts.sites(text, 1) == ["tf.dtypes.saturate_cast(x, tf.float16)", "tf.cast(y, 'float16')"]
    assert data_casts.to_float32(text, 1, 0) == text.replace("saturate_cast(x, tf.float16)", "saturate_cast(x, tf.float32)")
