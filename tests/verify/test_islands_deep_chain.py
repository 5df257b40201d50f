"""repair's edits at a line (``mpfix.verify.islands``) on a file whose long operator chain parses but
is deeper than LibCST's metadata and code generation can recurse: no edit, not a traceback.

Found by ``benchmarks/fuzz_hostile.py --verify-side`` (seed 61: a mutated file with ``y = a + 1 + 1
...`` of 1,000 terms): ``islands.float32_island`` raised RecursionError from
``MetadataWrapper.resolve(PositionProvider)``; the parse itself was allowed (``mpfix.parsing``).
"""

from __future__ import annotations

import pytest

from mpfix.verify import islands

HEAD = "import tensorflow as tf\n\n\ndef f(x):\n    return tf.exp(x)\n\n\n"


@pytest.mark.parametrize("chain", [" + 1", ".b"])
def test_a_deep_chain_gives_no_edit_instead_of_a_traceback(chain):
    text = HEAD + "y = a" + chain * 1000 + "\n"
    line = text.count("\n")
    assert islands.float32_island(text, line, 5, "Exp") is None
    assert islands.layer_float32(text, line) is None
    # Nor elsewhere in that file (the whole module is written back, chain included) ...
    assert islands.float32_island(text, 5, 12, "Exp") is None
    # ... while the same edit is made in the file without the chain.
    fixed = islands.float32_island(HEAD, 5, 12, "Exp")
    assert fixed is not None and "tf.cast(x, tf.float32)" in fixed
