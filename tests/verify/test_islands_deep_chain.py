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


def test_recursion_running_out_inside_a_function_body_gives_no_edit_either(monkeypatch):
    """LibCST's position provider records a compound statement's end from its body's, in a ``finally``: when
    the recursion limit is hit inside the body before the body is recorded, that lookup raises KeyError, with
    the RecursionError as its context. Fuzz seed 71 (mutated-487: 3,000 adjacent string literals in a
    ``def``, a left-nested ``ConcatenatedString``) ended repair's edit step with that KeyError. Where
    the limit is hit depends on the stack, so the test makes the body's code generation raise it."""
    import libcst as cst

    text = HEAD + "def g(x):\n    with x:\n        return tf.exp(x)\n"  # a KeyError per enclosing statement

    def too_deep(self, state):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(cst.IndentedBlock, "_codegen_impl", too_deep)
    assert islands.float32_island(text, 5, 12, "Exp") is None
    assert islands.layer_float32(text, 5) is None
