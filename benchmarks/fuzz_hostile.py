"""Fuzz ``mpfix check``/``apply`` with generated programs and mutated real files (issue 21).

Counts, for each input, a **crash** (the process died by a signal, e.g. LibCST's native parser
segfaulting), a **traceback** (any ``Traceback`` on stderr or stdout, or an exit status other than
0/1/2) and a **hang** (a batch that outlived its time limit). The targets are 0, 0 and 0.

* ``generated``: programs from hypothesmith (``from_grammar()``; random but syntactically valid
  Python), each behind a line that triggers a rule, so the engine parses it.
* ``mutated``: real files (``samples/``, the tests' ``.py`` fixtures, the installed ``keras`` and
  ``tf_keras`` packages, found without importing them) cut, duplicated, spliced, truncated, given
  random bytes or deep nesting, with a seeded RNG (reproducible: ``--seed``).
* ``notebooks`` (``--notebooks N``): ``.ipynb`` files whose code cells are mutated files, in a
  structure that is itself mutated: cells that are not objects, sources that are lists of
  non-strings or one string, missing or odd ``cell_type``, nbformat 3 worksheets, magics and shell
  lines, another kernel's language, huge outputs, and byte-level damage to the JSON.

Inputs run in batches through the real command line (``python -m mpfix check --format json``,
``--format sarif``, then ``apply`` on the same folder), as CI would; one in eight mutated inputs
starts with a PEP 263 coding line (a real codec, UTF-16, or none that exists), one in sixteen repeats
one of its lines 3,000 times; with ``--verify-side`` also through ``mpfix
instrument`` and repair's edit and write validation (no TensorFlow). A batch that fails is retried
file by file to name the culprit.

    python benchmarks/fuzz_hostile.py --generated 1000 --mutated 1000       # the full run
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIGGER = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef _fuzz(x):\n    return x\n\n\n"


@dataclass
class Outcome:
    inputs: int = 0
    crashes: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        return (f"{name}: {self.inputs} inputs, {len(self.crashes)} crashes, {len(self.tracebacks)} tracebacks, "
                f"{len(self.hangs)} hangs")


CORPUS_LIMIT = 60_000


def corpus(limit_bytes: int | None = None) -> list[Path]:
    """Real Python files to mutate."""
    limit_bytes = limit_bytes or CORPUS_LIMIT
    files = sorted((ROOT / "samples").glob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    for package in ("keras", "tf_keras"):
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            files += sorted(Path(folder).rglob("*.py"))
    return [f for f in files if f.is_file() and 0 < f.stat().st_size <= limit_bytes]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random mutation of a file's bytes."""
    n = len(data)
    kind = rng.randrange(9)
    i, j = sorted(rng.randrange(n + 1) for _ in range(2))
    if kind == 0:
        return data[:i] + data[j:]  # cut
    if kind == 1:
        return data[:j] + data[i:j] + data[j:]  # duplicate a span
    if kind == 2:
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))) + data[i:]
    if kind == 3:
        return data[:i]  # truncated
    if kind == 4:
        depth = rng.choice((50, 199, 250, 1000, 3000))
        return data[:i] + b"x = " + b"(" * depth + b"1" + b")" * depth + b"\n" + data[i:]
    if kind == 5:
        chain = rng.choice((b".b", b" + 1", b"()", b"[0]"))
        return data[:i] + b"\ny = a" + chain * rng.choice((100, 1000, 3000, 8000)) + b"\n" + data[i:]
    if kind == 6:
        lines = data.splitlines(keepends=True)
        rng.shuffle(lines)
        return b"".join(lines)
    if kind == 7:
        lines = data.splitlines(keepends=True)
        k = rng.randrange(len(lines) + 1)
        return b"".join(lines[:k] + [b" " * rng.randrange(1, 9) + line for line in lines[k:k + 20]] + lines[k + 20:])
    return data[:i] + rng.choice((b"\x00", b"\xff\xfe", b"\r", b"\t", b"\\", b'"""', b"'", b"#", b"\xef\xbb\xbf")) + data[i:]


def generated(count: int, seed: int) -> list[bytes]:
    """``count`` programs drawn from hypothesmith's grammar strategy."""
    import hypothesmith
    from hypothesis import HealthCheck, given, settings, strategies as st

    import warnings

    warnings.simplefilter("ignore", SyntaxWarning)  # hypothesmith compiles what it draws: `1()` warns
    programs: list[str] = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()))
    def collect(source: str) -> None:
        programs.append(source)

    collect()
    random.Random(seed).shuffle(programs)
    return [(TRIGGER + p).encode("utf-8", "surrogatepass") for p in programs[:count]]


# A PEP 263 coding line on some inputs (its own RNG, so the mutations of a seed stay what they were):
# check/apply/instrument decode through it and write back in it; a bogus or unusable one is an error.
CODINGS = (b"latin-1", b"cp1252", b"utf-8", b"euc-jp", b"utf-16", b"no-such-codec", b"latin-1\xff")


def with_coding(data: bytes, rng: random.Random) -> bytes:
    """``data`` behind a coding line, some of the time (1 in 8)."""
    if rng.randrange(8):
        return data
    return b"# -*- coding: " + rng.choice(CODINGS) + b" -*-\n" + data


def with_repeats(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one of its lines repeated 3,000 times, some of the time (1 in 16): work that grows
    with the uses of a name times the file's length shows as a hang (target evidence did: 154 s for
    20,000 ``x.reset_states()`` lines)."""
    lines = data.splitlines(keepends=True)
    if rng.randrange(16) or not lines:
        return data
    k = rng.randrange(len(lines))
    line = lines[k] if lines[k].endswith(b"\n") else lines[k] + b"\n"
    return b"".join(lines[:k] + [line] * 3000 + lines[k + 1:])


def mutated(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    coding_rng = random.Random(seed + 1_000_003)
    repeat_rng = random.Random(seed + 2_000_003)
    files = corpus()
    out = []
    while len(out) < count:
        data = rng.choice(files).read_bytes()
        for _ in range(rng.randrange(1, 4)):
            data = mutate(data, rng) if data else data
        out.append(with_coding(TRIGGER.encode() + with_repeats(data, repeat_rng), coding_rng))
    return out


def notebook(code: bytes, rng: random.Random) -> bytes:
    """A notebook holding ``code`` (mutated Python) in cells, with its structure mutated too."""
    import json

    text = code.decode("utf-8", "surrogateescape")
    lines = text.splitlines(keepends=True)
    cuts = sorted(rng.sample(range(len(lines) + 1), min(len(lines) + 1, rng.randrange(1, 5))))
    chunks = ["".join(lines[a:b]) for a, b in zip([0, *cuts], [*cuts, len(lines)])]
    cells: list = []
    for chunk in chunks:
        source: object = chunk.splitlines(keepends=True) if rng.randrange(2) else chunk
        cell: dict = {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
        kind = rng.randrange(14)
        if kind == 0:
            cell["cell_type"] = rng.choice(("markdown", "raw", "", None, 3, "CODE"))
        elif kind == 1:
            cell["source"] = rng.choice(([1, None, "x = 1\n"], {"a": 1}, None, 5, [["nested"]]))
        elif kind == 2:
            cell["source"] = ["%matplotlib inline\n", "!pip install tensorflow\n", "%%time\n", *chunk.splitlines(keepends=True)]
        elif kind == 3:
            del cell["source"]
        elif kind == 4:
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["x" * 1000] * 500}]
        elif kind == 5:
            cell = rng.choice((cell["source"], None, 7, "cell", [cell]))
        elif kind == 6:
            cell["source"] = "\r".join(chunk.splitlines())  # old-Mac newlines
        cells.append(cell)
    document: dict = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                      "nbformat": 4, "nbformat_minor": 5}
    kind = rng.randrange(10)
    if kind == 0:
        document = {"worksheets": [{"cells": cells}], "nbformat": 3, "metadata": {}}
    elif kind == 1:
        document["metadata"]["kernelspec"]["language"] = rng.choice(("R", "julia", None, 5))
    elif kind == 2:
        document["cells"] = rng.choice(({"0": cells}, None, "cells", 1))
    elif kind == 3:
        document["nbformat"] = rng.choice((3, 5, "4", None, 10 ** 30))
    elif kind == 4:
        document = cells  # a bare list
    data = json.dumps(document, indent=rng.choice((None, 1))).encode("utf-8", "surrogateescape")
    if rng.randrange(4) == 0:
        data = mutate(data, rng)  # damaged JSON
    return data


def notebooks(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed + 3_000_017)
    files = corpus()
    out = []
    while len(out) < count:
        data = rng.choice(files).read_bytes()
        for _ in range(rng.randrange(0, 3)):
            data = mutate(data, rng) if data else data
        out.append(notebook(TRIGGER.encode() + data, rng))
    return out


COMMANDS = [["check", "--format", "json"], ["check", "--format", "sarif"], ["diff"], ["apply"]]
JOBS = "1"

# ``--verify-side``: what verify/repair/instrument do with a user's file, without TensorFlow: ``mpfix
# instrument`` (its command, in-process), repair's edits at a line (``islands``) and its write
# validation (``python_problem``). Exceptions propagate (a traceback); exit statuses other than 0/2 fail.
VERIFY_SIDE = ["verify-side"]
VERIFY_SIDE_PROBE = r"""
from pathlib import Path
from click.testing import CliRunner
from mpfix.verify import islands
from mpfix.verify.instrument import instrument
from mpfix.verify.python_problem import python_problem
for path in sorted(Path(".").glob("*.py")):
    result = CliRunner().invoke(instrument, [str(path)], catch_exceptions=False)
    if result.exit_code not in (0, 2):
        raise SystemExit(f"{path}: mpfix instrument exited {result.exit_code}")
    text = path.read_bytes().decode("utf-8", "replace")
    middle = max(1, text.count("\n") // 2)
    islands.float32_island(text, middle, 5, "Exp")
    islands.layer_float32(text, middle)
    python_problem(path, text, text + "\n")
"""


def _run(folder: Path, command: list[str], timeout: float) -> tuple[str | None, str]:
    """(problem or None, output) of one mpfix command over ``folder``."""
    env = dict(os.environ, MPFIX_CACHE_DIR=str(folder / ".cache"), NO_COLOR="1")
    argv = ([sys.executable, "-c", VERIFY_SIDE_PROBE] if command == VERIFY_SIDE
            else [sys.executable, "-m", "mpfix", *command, "--no-cache", "-j", JOBS, "."])
    try:
        result = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", ""
    output = result.stdout + result.stderr
    if result.returncode < 0:
        return "crash", output
    if "Traceback" in output or result.returncode not in (0, 1, 2):
        return "traceback", output
    return None, output


def run_batch(inputs: list[bytes], names: list[str], outcome: Outcome, timeout_per_file: float,
              suffix: str = ".py") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pyproject.toml").write_text("[project]\nname = 'fuzz'\n")
        for index, data in enumerate(inputs):
            (folder / f"f{index:05d}{suffix}").write_bytes(data)
        for command in COMMANDS:
            problem, _ = _run(folder, command, timeout_per_file * len(inputs) + 30)
            if problem is None:
                continue
            if len(inputs) > 1:  # name the culprit(s): each file alone
                for data, name in zip(inputs, names):
                    run_batch([data], [name], outcome, timeout_per_file, suffix)
                return
            getattr(outcome, {"crash": "crashes", "traceback": "tracebacks", "hang": "hangs"}[problem]).append(
                f"{names[0]} ({' '.join(command)})")
            return


def fuzz(name: str, inputs: list[bytes], batch: int, timeout_per_file: float, keep: Path | None,
         suffix: str = ".py") -> Outcome:
    outcome = Outcome(inputs=len(inputs))
    names = [f"{name}-{i}" for i in range(len(inputs))]
    started = time.monotonic()
    for start in range(0, len(inputs), batch):
        run_batch(inputs[start:start + batch], names[start:start + batch], outcome, timeout_per_file, suffix)
        done = min(start + batch, len(inputs))
        print(f"  {name}: {done} done, {len(outcome.crashes)} crashes, {len(outcome.tracebacks)} tracebacks, "
              f"{len(outcome.hangs)} hangs ({time.monotonic() - started:.0f} s)", flush=True)
    if keep is not None:
        for label in outcome.crashes + outcome.tracebacks + outcome.hangs:
            index = int(label.split()[0].rsplit("-", 1)[1])
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{name}-{index}{suffix}").write_bytes(inputs[index])
    print(outcome.line(name) + f" ({time.monotonic() - started:.0f} s)", flush=True)
    for label in outcome.crashes + outcome.tracebacks + outcome.hangs:
        print(f"  {label}")
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", type=int, default=1000)
    parser.add_argument("--mutated", type=int, default=1000)
    parser.add_argument("--notebooks", type=int, default=0, help="mutated .ipynb files (structure and cells)")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--batch", type=int, default=100)
    # A batch's limit is this many seconds per file (+30 s): LibCST takes ~1 s for a 60 KB file on a
    # loaded machine; a batch over its limit is retried file by file, where a real hang shows.
    parser.add_argument("--timeout-per-file", type=float, default=5.0)
    parser.add_argument("--keep", type=Path, help="copy failing inputs into this folder")
    parser.add_argument("--check-only", action="store_true", help="run check --format json, not apply")
    parser.add_argument("--jobs", default="1", help="mpfix --jobs for each batch")
    parser.add_argument("--max-bytes", type=int, default=60_000, help="largest real file to mutate")
    parser.add_argument("--verify-side", action="store_true",
                        help="also run mpfix instrument and repair's edits/validation on each input (no TensorFlow)")
    options = parser.parse_args()
    global JOBS, CORPUS_LIMIT
    JOBS, CORPUS_LIMIT = options.jobs, options.max_bytes
    if options.check_only:
        COMMANDS[:] = COMMANDS[:1]
    if options.verify_side:
        COMMANDS.append(VERIFY_SIDE)
    outcomes = []
    if options.mutated:
        outcomes.append(fuzz("mutated", mutated(options.mutated, options.seed), options.batch,
                             options.timeout_per_file, options.keep))
    if options.notebooks:
        outcomes.append(fuzz("notebooks", notebooks(options.notebooks, options.seed), options.batch,
                             options.timeout_per_file, options.keep, ".ipynb"))
    if options.generated:
        outcomes.append(fuzz("generated", generated(options.generated, options.seed), options.batch,
                             options.timeout_per_file, options.keep))
    return 1 if any(o.crashes or o.tracebacks or o.hangs for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
