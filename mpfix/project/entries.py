"""One file's float16 entry points and imports, read from bytes (``mpfix.project.reachability``).

An entry point sets a mixed policy, switches grappler's ``auto_mixed_precision`` on or sets
``TF_ENABLE_AUTO_MIXED_PRECISION`` to a true value; a mention that sets nothing (a comparison, a
dict key, prose, a comment, an ``os.environ.get`` of the switch) is not one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from mpfix.project.kinds import Policy

ENV_SWITCH = "TF_ENABLE_AUTO_MIXED_PRECISION"
GRAPPLER_OPTION = "auto_mixed_precision"
GRAPH_REWRITE = "enable_mixed_precision_graph_rewrite"


def env_switch_on(value: str) -> bool:
    """How TensorFlow reads the environment switch: "1"/"true" (any case) turn the rewrite on."""
    return value.strip().lower() in ("1", "true")


def grappler_value_off(code: str) -> bool:
    """Whether the value given to grappler's ``auto_mixed_precision`` (source code) leaves it off."""
    code = code.strip()
    return code in ("False", "0", "None") or code.endswith(".OFF")


# -- one file's entry points ------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """Where a file switches float16 (or bfloat16) on."""

    policy: Policy
    line: int
    what: str  # e.g. 'sets "mixed_float16"'
    scope: str = "global"  # "global"; "module": this test module only; "fixture": tests using ``fixture``
    fixture: str | None = None
    autouse: bool = False
    function: str | None = None  # the function whose body switches it on (callers become entry points)
    in_test: bool = False  # inside a test function (at any depth)


_NEEDLES = (b"mixed_float16", b"mixed_bfloat16", b"auto_mixed_precision", b"TF_ENABLE_AUTO",
            b"enable_mixed_precision_graph")


def may_switch(data: bytes) -> bool:
    # Plain substring tests: far cheaper than one regex with alternatives over every file.
    return any(needle in data for needle in _NEEDLES)


_POLICY_LITERAL = re.compile(rb"""(['"])mixed_(b?float16)\1""")
_GRAPPLER = re.compile(rb"""(?:['"]auto_mixed_precision['"]\s*:|\.auto_mixed_precision\s*=(?!=))\s*([^,}\n#)]+)""")
_GRAPH_REWRITE = re.compile(rb"\benable_mixed_precision_graph_rewrite\s*\(")
_ENV = re.compile(rb"""(['"]?)TF_ENABLE_AUTO_MIXED_PRECISION\1\s*(\]\s*=(?!=)|,|:|=(?!=))\s*([^,}\n#)]*)""")
_ENV_READS = re.compile(rb"""(?:\.get|getenv|\.pop|\bin)\s*\(?\s*$""")
# Decorators whose arguments parametrise tests: the policies they name reach those tests only.
_TEST_PARAMS = re.compile(
    rb"@pytest\.fixture\s*\(|pytest\.mark\.parametrize\s*\(|@(?:parameterized|absltest)\.\w+\s*\(|"
    rb"\bpytest\.param\s*\(|\bnamed_product\s*\(")
_DEF = re.compile(rb"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_NEXT_DEF = re.compile(rb"\s*(?:@[^\n]*\n\s*)*(?:async\s+)?def\s+(\w+)")
_ACCEPT_BEFORE = frozenset(b"([{,:=")
_ACCEPT_WORDS = (b"return", b"yield", b"else", b"or", b"and", b"lambda")


def line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def line_prefix(data: bytes, offset: int) -> bytes:
    return data[data.rfind(b"\n", 0, offset) + 1:offset]


def _in_comment(data: bytes, offset: int) -> bool:
    prefix = line_prefix(data, offset).lstrip()
    if prefix.startswith(b'"'):
        prefix = prefix[1:].lstrip()
    return prefix.startswith(b"#") or (b"#" in prefix and prefix.count(b'"') % 2 == 0 and prefix.count(b"'") % 2 == 0)


def _in_comment_or_doctest(data: bytes, offset: int) -> bool:
    prefix = line_prefix(data, offset).lstrip()
    # A notebook's JSON holds each line as a string: `    "# comment\n",`.
    if prefix.startswith(b'"'):
        prefix = prefix[1:].lstrip()
    return prefix.startswith((b"#", b">>>", b"...")) or (b"#" in prefix and prefix.count(b'"') % 2 == 0
                                                         and prefix.count(b"'") % 2 == 0)


_TRIPLE = re.compile(rb"\"\"\"|'''")


def _docstring_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every triple-quoted string (docstrings: prose and examples, not code)."""
    spans, open_at, quote = [], None, None
    for match in _TRIPLE.finditer(data):
        if open_at is None:
            open_at, quote = match.start(), match.group()
        elif match.group() == quote:
            spans.append((open_at, match.end()))
            open_at = None
    return spans


def _in_spans(spans: list[tuple[int, int]], offset: int) -> bool:
    return any(start < offset < end for start, end in spans)


def _in_string(data: bytes, offset: int) -> bool:
    """Whether ``offset`` is inside a string literal that opened on its line (an error message)."""
    prefix = line_prefix(data, offset)
    return prefix.count(b'"') % 2 == 1 or prefix.count(b"'") % 2 == 1


def _sets_policy(data: bytes, start: int, end: int) -> bool:
    """Whether the policy literal at ``data[start:end]`` sets something (an argument, a value)."""
    after = data[end:end + 8].lstrip()
    if after.startswith((b"==", b"!=", b":", b"in ", b"not ")):
        return False  # a comparison, a membership test or a dict key
    i = start - 1
    while i >= 0 and data[i] in b" \t\r\n\\":
        i -= 1
    if i < 0:
        return False
    char = data[i]
    if char in _ACCEPT_BEFORE:
        if char == ord("="):
            return i == 0 or data[i - 1] not in b"=!<>"
        if char in b"([,":
            return not _in_tested_collection(data, i)
        return True
    word = data[max(0, i - 6):i + 1]
    return any(word.endswith(w) and (len(word) == len(w) or not chr(word[-len(w) - 1]).isalnum())
               for w in _ACCEPT_WORDS)


def _in_tested_collection(data: bytes, i: int) -> bool:
    """Whether the element before ``data[i]`` (a ``(``, ``[`` or ``,``) sits in ``x in (...)`` / ``== [...]``."""
    depth, j, low = 0, i, max(0, i - 400)
    if data[i] in b"([":
        j, depth = i, 1
    else:
        while j > low:
            j -= 1
            c = data[j]
            if c in b")]}":
                depth += 1
            elif c in b"([{":
                if depth == 0:
                    break
                depth -= 1
        else:
            return False
    k = j - 1
    while k >= 0 and data[k] in b" \t":
        k -= 1
    before = data[max(0, k - 3):k + 1]
    return before.endswith((b" in", b"==", b"!=")) or before == b"in"


def _bracket_end(data: bytes, open_paren: int) -> int:
    """Offset just past the bracket that closes the one at ``open_paren`` (strings skipped roughly)."""
    depth, i, n = 0, open_paren, len(data)
    while i < n:
        c = data[i]
        if c in b"([{":
            depth += 1
        elif c in b")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c in b"'\"":
            close = data.find(bytes([c]), i + 1)
            while close > 0 and data[close - 1] == ord("\\"):
                close = data.find(bytes([c]), close + 1)
            if close < 0:
                return n
            i = close
        elif c == ord("#"):
            newline = data.find(b"\n", i)
            i = n if newline < 0 else newline
            continue
        i += 1
    return n


def _test_spans(data: bytes) -> list[tuple[int, int, bytes]]:
    """(start, end, decorator text) of every argument list that parametrises tests."""
    spans = []
    for match in _TEST_PARAMS.finditer(data):
        open_paren = match.end() - 1
        spans.append((match.start(), _bracket_end(data, open_paren), match.group()))
    return spans


class Defs:
    """The ``def`` lines of one file, found once: (offset of the line, indentation, name)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._found: list[tuple[int, int, str]] | None = None

    def enclosing(self, offset: int) -> str | None:
        """The innermost ``def`` whose body holds ``offset`` (by indentation; approximate)."""
        found = self._enclosing(offset)
        return found[2] if found is not None else None

    def in_test(self, offset: int) -> bool:
        """Whether ``offset`` lies in a test function (at any depth: classes defined inside one too)."""
        for _ in range(12):
            found = self._enclosing(offset)
            if found is None:
                return False
            if found[2].startswith("test"):
                return True
            offset = found[0] + found[1]  # the def keyword itself: what encloses the def
        return False

    def _enclosing(self, offset: int) -> tuple[int, int, str] | None:
        data = self.data
        prefix = line_prefix(data, offset)
        indent = len(prefix) - len(prefix.lstrip(b" \t"))
        if indent == 0:
            return None
        if self._found is None:
            self._found = [(m.start(), len(m.group(1)), m.group(2).decode("ascii", "replace"))
                           for m in _DEF.finditer(data)]
        line_start = offset - len(prefix)
        best = None
        for found in self._found:
            if found[0] >= line_start:
                break
            if found[1] < indent:
                best = found
        if best is None:
            return None
        # A statement at or left of the def's indentation between it and us ends its body.
        body_start = data.find(b"\n", best[0])
        for line in data[body_start + 1:line_start].split(b"\n"):
            stripped = line.lstrip(b" \t")
            if stripped and not stripped.startswith((b"#", b")")) and len(line) - len(stripped) <= best[1]:
                return None
        return best


def _enclosing_function(data: bytes, offset: int) -> str | None:
    return Defs(data).enclosing(offset)


def entries_in(data: bytes, conftest: bool = False) -> list[Entry]:
    """Every place ``data`` (a module's bytes, or a notebook's JSON) switches a mixed policy on."""
    if not may_switch(data):
        return []
    found: list[Entry] = []
    spans: list[tuple[int, int, bytes]] | None = None
    defs = Defs(data)
    docstrings = _docstring_spans(data) if b'"""' in data or b"'''" in data else []
    for match in _POLICY_LITERAL.finditer(data):
        start, end = match.span()
        # A docstring's example that sets the policy is documentation that runs the module's code under
        # it (the "docs"): it counts; prose ("works under "mixed_float16"") does not (_sets_policy).
        if _in_comment(data, start) or not _sets_policy(data, start, end):
            continue
        policy = Policy.FLOAT16 if match.group(2) == b"float16" else Policy.BFLOAT16
        what = f'sets "mixed_{match.group(2).decode()}"'
        if spans is None:
            spans = _test_spans(data)
        span = next((s for s in spans if s[0] < start < s[1]), None)
        line = line_of(data, start)
        if span is None:
            found.append(Entry(policy, line, what, function=defs.enclosing(start), in_test=defs.in_test(start)))
            continue
        fixture = None
        if span[2].startswith(b"@pytest.fixture"):
            following = _NEXT_DEF.match(data, span[1])
            fixture = following.group(1).decode("ascii", "replace") if following else None
        autouse = re.search(rb"autouse\s*=\s*True", data[span[0]:span[1]]) is not None
        if fixture is not None:
            found.append(Entry(policy, line, f"parametrises fixture `{fixture}` over \"mixed_"
                               f"{match.group(2).decode()}\"", scope="fixture", fixture=fixture, autouse=autouse))
        else:
            found.append(Entry(policy, line, f"parametrises its tests over \"mixed_{match.group(2).decode()}\"",
                               scope="module"))
    for match in _GRAPPLER.finditer(data):
        if (_in_comment_or_doctest(data, match.start()) or _in_spans(docstrings, match.start())
                or grappler_value_off(match.group(1).decode("latin-1"))):
            continue
        found.append(Entry(Policy.FLOAT16, line_of(data, match.start()),
                           "switches grappler's auto_mixed_precision on",
                           function=defs.enclosing(match.start()), in_test=defs.in_test(match.start())))
    for match in _GRAPH_REWRITE.finditer(data):
        if (_in_comment_or_doctest(data, match.start()) or _in_string(data, match.start())
                or _in_spans(docstrings, match.start())
                or line_prefix(data, match.start()).lstrip().startswith(b"def ")):
            continue
        found.append(Entry(Policy.FLOAT16, line_of(data, match.start()),
                           "calls enable_mixed_precision_graph_rewrite",
                           function=defs.enclosing(match.start()), in_test=defs.in_test(match.start())))
    for match in _ENV.finditer(data):
        if _in_comment_or_doctest(data, match.start()) or _in_spans(docstrings, match.start()):
            continue
        separator = match.group(2)
        if separator == b"," and _ENV_READS.search(data[max(0, match.start() - 12):match.start()]):
            continue  # os.environ.get(name, default), os.getenv(...), os.environ.pop(...)
        if separator.startswith(b"=") and match.group(1):
            continue  # "TF_ENABLE_AUTO_MIXED_PRECISION" = ...: not Python
        if not _env_value_on(match.group(3).strip()):
            continue
        found.append(Entry(Policy.FLOAT16, line_of(data, match.start()),
                           f"sets {ENV_SWITCH}", function=defs.enclosing(match.start()), in_test=defs.in_test(match.start())))
    return found


def _env_value_on(value: bytes) -> bool:
    if not value:
        return False
    text = value.decode("latin-1")
    literals = re.findall(r"""(['"])([^'"]*)\1""", text)
    if re.fullmatch(r"""(['"])([^'"]*)\1""", text):
        return env_switch_on(text[1:-1])
    if literals and " if " in text:  # "1" if flag else "0": on when the flag is
        return any(env_switch_on(v) for _, v in literals)
    return text.lower() not in ("0", "false", "none")  # a number, a name, a call: maybe on


def policy_in_entries(entries: list[Entry]) -> Policy:
    if any(e.policy is Policy.FLOAT16 for e in entries):
        return Policy.FLOAT16
    if entries:
        return Policy.BFLOAT16
    return Policy.NONE


# -- imports ----------------------------------------------------------------------------------

_IMPORT = re.compile(
    rb"[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)|import[ \t]+([^\n#;]*))")
_IMPORT_WORD = re.compile(rb"import[ \t(\\]")


def imports_in(data: bytes) -> list[tuple[int, str, tuple[str, ...]]]:
    """(relative level, module, imported names) of every import statement (``import a.b``: (0, "a.b", ()))."""
    out = []
    seen_lines: set[int] = set()
    # The word "import" is a literal the regex engine finds fast; only its lines are matched in full.
    for word in _IMPORT_WORD.finditer(data):
        line_start = data.rfind(b"\n", 0, word.start()) + 1
        if line_start in seen_lines:
            continue
        seen_lines.add(line_start)
        match = _IMPORT.match(data, line_start)
        if match is None:
            continue
        if match.group(4) is not None:
            for part in match.group(4).split(b","):
                name = part.strip().split()[0] if part.strip() else b""
                if re.fullmatch(rb"[\w.]+", name):
                    out.append((0, name.decode("ascii", "replace"), ()))
        else:
            names = match.group(3).strip(b"() \t\r\n\\")
            imported = tuple(
                n.strip().split()[0].decode("ascii", "replace")
                for n in names.replace(b"\n", b" ").replace(b"\\", b" ").split(b",") if n.strip())
            out.append((len(match.group(1)), match.group(2).decode("ascii", "replace"), imported))
    return out


def notebook_code(data: bytes) -> bytes:
    """The code cells of a notebook as one module's bytes (empty when it is not valid JSON)."""
    try:
        notebook = json.loads(data)
        cells = notebook.get("cells", [])
    except (ValueError, AttributeError, RecursionError):  # RecursionError: JSON nested too deeply
        return b""
    parts = []
    for cell in cells if isinstance(cells, list) else ():
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            # A malformed notebook may hold non-strings in a source list: they are no code.
            parts.append("".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else str(source))
    return "\n".join(parts).encode("utf-8", "replace")
