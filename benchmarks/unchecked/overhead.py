"""What telling the user about skipped float16 files costs: the ``mpfix.unchecked.skipped`` test
per file, as a ratio of linting the same files (one process, the project scans done first).

    python benchmarks/unchecked/overhead.py [CORPUS_FOLDER] [--files N]

Measured on tfm (250 files, every fourth of official/; 33 skipped): 0.013x (10.3 s lint, 0.14 s test), on a
machine shared by eight people.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", type=Path, default=Path("/work/corpora/tfm/official"))
    parser.add_argument("--files", type=int, default=250)
    args = parser.parse_args(argv)

    from mpfix import unchecked
    from mpfix.codemods import all_rules
    from mpfix.engine import Options
    from mpfix.runner import Job, Mode, engine_for

    engine = engine_for(Job(tuple(r.code for r in all_rules()), Options(), Mode.CHECK))
    files = sorted(args.corpus.rglob("*.py"))[::4][: args.files]
    texts = [(path, path.read_text(encoding="utf-8", errors="replace")) for path in files]
    for path, text in texts:
        unchecked.skipped(engine, text, path)  # project scans and imports, outside both timings
    start = time.perf_counter()
    for path, text in texts:
        engine.lint(text, path)
    linted = time.perf_counter() - start
    start = time.perf_counter()
    count = sum(unchecked.skipped(engine, text, path) for path, text in texts)
    tested = time.perf_counter() - start
    print(f"{len(texts)} files, {count} skipped for float16: lint {linted:.2f} s, test {tested:.3f} s, "
          f"ratio {tested / linted:.4f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
