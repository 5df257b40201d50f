"""``mpfix.parsing.parse_module`` builds LibCST's tree without re-validating it, and nothing else changes."""

from __future__ import annotations

import libcst as cst
import pytest

from mpfix.parsing import parse_module, validation_active
from test_walk import SNIPPET, _corpus


@pytest.mark.slow  # a corpus-equivalence check (~60 s on two cores): `pytest -m "not slow"` skips it
def test_same_tree_as_libcst_on_real_code():
    texts = [SNIPPET, SNIPPET.replace("\n", "\r\n")]
    texts += [path.read_text(encoding="utf-8") for path in _corpus()]
    for text in texts:
        ours = parse_module(text)
        assert ours.deep_equals(cst.parse_module(text))
        assert ours.code == text
    assert validation_active()


def test_parser_built_nodes_skip_validation_and_hand_built_ones_keep_it(monkeypatch):
    calls = []
    original = cst.Name._validate
    monkeypatch.setattr(cst.Name, "_validate", lambda self: calls.append(self.value) or original(self))

    parse_module("x = y\n")
    assert calls == []  # the parser's own nodes: not re-checked
    cst.parse_module("x = y\n")
    assert calls == ["x", "y"]  # plain LibCST checks every one

    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")  # a fix's replacement nodes are still validated


def test_syntax_errors_are_libcst_errors_and_validation_comes_back():
    with pytest.raises(cst.ParserSyntaxError) as ours:
        parse_module("def f(:\n    pass\n")
    with pytest.raises(cst.ParserSyntaxError) as theirs:
        cst.parse_module("def f(:\n    pass\n")
    assert (ours.value.raw_line, ours.value.raw_column, ours.value.message) == (
        theirs.value.raw_line, theirs.value.raw_column, theirs.value.message)
    assert validation_active()
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")


def test_a_rejected_text_is_parsed_by_libcst_once_however_often_it_is_parsed():
    """The verify side parses one user's text up to four times (instrument, two island edits, the write
    validation); a text CPython rejects is probed once in a forked child, whose LibCST error is raised
    again, unchanged, without another LibCST parse (fuzz input mutated-5 took 48 s, four probes and
    four parses of ~8 s of error recovery). In a fresh process: the probe forks only where no other
    thread runs, and the test session leaves some."""
    import subprocess
    import sys

    script = """
import libcst as cst
from mpfix import parsing
text = "import tensorflow as tf\\r\\n\\r\\nx = [1,\\r\\ndef f(:\\r\\n    pass\\r\\n"
def error(parse):
    try:
        parse(text)
    except cst.ParserSyntaxError as e:
        return (str(e), e.message, e.raw_line, e.raw_column, e.editor_line, e.editor_column)
theirs = error(cst.parse_module)
first = error(parsing.parse_module)
def no_second_parse(*args, **kwargs):
    raise AssertionError("LibCST parsed the same rejected text again")
cst.parse_module = no_second_parse
parsing._libcst_probe = no_second_parse
again = [error(parsing.parse_module) for _ in range(3)]
assert theirs is not None and first == theirs and again == [theirs] * 3, (theirs, first, again)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_rejected_file_libcst_would_take_minutes_on_is_an_mp000_with_cpythons_message(tmp_path):
    """A long call chain where CPython already says SyntaxError: LibCST's error recovery is
    quadratic in it (a fuzzed file: 8,000 calls, over 30 s). Its parse is tried in a forked child
    for ``PARSE_PROBE_SECONDS`` (lowered here); then the file is an MP000 and the run goes on."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    slow = tmp_path / "slow.py"
    slow.write_text("import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(root,\n"
                    "y = a" + "()" * 6000 + "(\n*, cache: bool) -> None:\n    pass\n")
    plain = tmp_path / "plain.py"
    plain.write_text("import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef g(:\n    pass\n")
    script = ("import sys\nfrom mpfix import parsing\nparsing.PARSE_PROBE_SECONDS = 0.5\nfrom mpfix.cli import main\n"
              f"sys.argv = ['mpfix', 'check', '--no-cache', '--jobs', '1', '--format', 'json', {str(slow)!r}, {str(plain)!r}]\n"
              "main()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    errors = {Path(e["filename"]).name: e for e in json.loads(done.stdout) if e["code"] == "MP000"}
    message = errors["slow.py"]["message"]
    assert message.startswith("SyntaxError: ") and message.endswith("(mpfix's parser did not finish on this file "
                                                                    "within 0.5 s)"), message
    assert errors["plain.py"]["message"].startswith("SyntaxError:") and "did not finish" not in errors["plain.py"]["message"]


def test_a_rejected_text_is_parsed_once_where_other_threads_run_too(monkeypatch):
    """The editor server runs threads, so no child is forked there (forking a threaded process is
    unsafe); LibCST's error for a rejected text was then computed again on every parse (a fuzzed 66-line
    file: ~8 s each). The error is remembered by the text's digest, and raised again. Since turn 8 the
    one parse runs in the reused helper process (``parse_probe``), bounded in time, not in this one."""
    import threading

    from mpfix import parse_probe

    text = "import tensorflow as tf\n\nthreaded = [1,\ndef f(:\n    pass\n"
    expected = None
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        expected = (str(exc), exc.message, exc.raw_line, exc.raw_column, exc.editor_line, exc.editor_column)
    assert expected is not None
    calls = []
    real = cst.parse_module
    monkeypatch.setattr(cst, "parse_module", lambda source, *a, **k: calls.append(source) or real(source, *a, **k))
    asked = []
    helper = parse_probe._HELPER.probe
    monkeypatch.setattr(parse_probe._HELPER, "probe", lambda source, seconds: asked.append(source) or helper(source, seconds))
    release = threading.Event()
    other = threading.Thread(target=release.wait, daemon=True)  # as the server's threads
    other.start()
    try:
        seen = []
        for _ in range(3):
            with pytest.raises(cst.ParserSyntaxError) as error:
                parse_module(text)
            e = error.value
            seen.append((str(e), e.message, e.raw_line, e.raw_column, e.editor_line, e.editor_column))
    finally:
        release.set()
        other.join()
    assert seen == [expected] * 3
    assert asked == [text]  # one LibCST parse, in the helper (no fork with threads running)
    assert calls == []  # none in this process


def test_threads_parsing_rejected_texts_at_once_get_their_own_errors():
    """The remembered errors are shared by threads: each thread gets its text's own error, and the table's
    eviction (64 texts) never breaks a reader (a dict changed during iteration)."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"value_{i} = [{i},\ndef f(:\n    pass\n" for i in range(100)]

    def one(text):
        try:
            parse_module(text)
        except cst.ParserSyntaxError as exc:
            return exc.raw_line, exc.message
        return None

    with ThreadPoolExecutor(4) as pool:
        first = list(pool.map(one, texts * 2))
    expected = [one(text) for text in texts]
    assert all(e is not None for e in expected)
    assert first == expected * 2


def test_a_node_another_thread_builds_during_the_parse_is_still_validated(monkeypatch):
    """The skipped re-validation is class-wide while the parse runs, and the parse lets other threads run
    between nodes (the editor server's): a node built in another thread meanwhile, a fix's replacement,
    is validated as ever. The other thread builds its nodes while this one is inside LibCST's parse."""
    import threading

    from mpfix import parsing

    real = cst.parse_module
    seen = []

    def build_elsewhere():
        seen.append(validation_active())
        for value in ("not a name", "1x"):
            try:
                cst.Name(value)
                seen.append(f"{value!r} built")
            except cst.CSTValidationError:
                seen.append(f"{value!r} refused")

    def parse_while_another_thread_builds(source, *args, **kwargs):
        other = threading.Thread(target=build_elsewhere)
        other.start()
        other.join()
        return real(source, *args, **kwargs)

    monkeypatch.setattr(parsing.cst, "parse_module", parse_while_another_thread_builds)
    assert parse_module("x = y\n").deep_equals(real("x = y\n"))
    assert seen == [False, "'not a name' refused", "'1x' refused"]  # False: the class-wide hook was in place
    assert validation_active()


def test_libcst_node_classes_answer_isinstance_by_their_mro_as_abcmeta_does():
    """mpfix.parsing gives LibCST's node classes (all ABCs) type's own C check of the MRO: 3.1M
    ``ABCMeta.__instancecheck__`` calls were ~5% of a check of tf-models. The answers are ABCMeta's for
    every pair of node classes, and a registered virtual subclass is still seen (in a fresh process:
    registering changes the classes for good)."""
    import abc
    import subprocess
    import sys

    from mpfix import parsing

    classes = [c for c in vars(cst).values() if isinstance(c, type) and issubclass(c, cst.CSTNode)]
    assert len(classes) > 150
    assert all(type(c) is parsing._MroChecks for c in classes)  # the hook applies (fails if LibCST changed)
    for above in classes:
        for below in classes:
            assert issubclass(below, above) == abc.ABCMeta.__subclasscheck__(above, below), (below, above)
    assert isinstance(cst.Name("x"), cst.BaseExpression) and not isinstance(cst.Name("x"), cst.Attribute)
    script = """
import libcst as cst
from mpfix import parsing
class Virtual:
    pass
assert not isinstance(Virtual(), cst.BaseExpression)
cst.BaseExpression.register(Virtual)
assert isinstance(Virtual(), cst.BaseExpression) and isinstance(Virtual(), cst.CSTNode)
assert issubclass(Virtual, cst.BaseExpression) and not isinstance(Virtual(), cst.BaseStatement)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_same_tree_as_libcst_on_a_sample():
    """The quick form of the slow corpus test above (``benchmarks/parse_equality.py`` runs it on whole corpora)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from parse_equality import compare

    here = Path(__file__).resolve().parents[1]
    texts = [SNIPPET, SNIPPET.replace("\n", "\r\n"), "x = [1,\ndef f(:\n    pass\n"]
    texts += [(here / "mpfix" / name).read_text(encoding="utf-8") for name in ("engine.py", "runner.py", "parsing.py")]
    assert [compare(text) for text in texts] == [None] * len(texts)
    assert compare("x = 1\n") is None and validation_active()
