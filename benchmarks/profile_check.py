#!/usr/bin/env python
"""Where does a cold ``mpfix check`` spend its CPU?  (cProfile of one in-process ``--jobs 1`` run)

Runs ``mpfix check FOLDER --no-cache --jobs 1 --format json`` in this process under cProfile
(imports included: run it with a fresh interpreter) and prints:

  * phases: the cumulative time of the stages' entry points (imports, the project facts, the
    prefilter, the LibCST parse, each analysis, the rules' traversal, positions, ...);
  * self time by module group: each rule file, each analysis/facts module, the walk, the
    project pass, LibCST, the standard library;
  * the top functions by self time.

cProfile slows Python code ~2-5x and leaves C code (LibCST's native parser, ``ast.parse``) nearly
as is, so read the numbers as shares of one run, and compare runs of the same kind only.
``--no-profile`` runs the same check with light timers on the phases instead (unbiased wall/CPU
of parse, rules and project facts; no per-module split), and the parse bound: how many parsed
texts had any report, and their share of the parse.

Usage: python benchmarks/profile_check.py FOLDER [--policy mixed_float16] [--top 25] [--save out.prof]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import sys
import time
from collections import defaultdict

# (label, module-file suffix, function name): entry points whose cumulative time is a phase.
PHASES = (
    ("imports (top-level _find_and_load)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("project facts (file_facts -> prepare, reach, scan)", "mpfix/project/facts.py", "file_facts"),
    ("  cross-file scan (_cross_calls)", "mpfix/project/facts.py", "_cross_calls"),
    ("  callers index (_helpers)", "mpfix/project/facts.py", "_helpers"),
    ("  reach (policy.reach_for)", "mpfix/policy.py", "reach_for"),
    ("cache keys (Keyer.key)", "mpfix/cache.py", "key"),
    ("rule selection / prefilter (Engine._select)", "mpfix/engine.py", "_select"),
    ("gate before the parse (Engine._gated, mpfix.gate)", "mpfix/engine.py", "_gated"),
    ("LibCST parse (parsing.parse_module)", "mpfix/parsing.py", "parse_module"),
    ("import table (ImportTable.__init__)", "codemods/names.py", "__init__"),
    ("rules + analyses (visit_batched)", "codemods/_walk.py", "visit_batched"),
    ("  nodes_by_type (one walk)", "codemods/_walk.py", "nodes_by_type"),
    ("  dtype analysis (DtypeAnalysis.__init__)", "codemods/analysis/dtypes.py", "__init__"),
    ("  training steps (gradient_builder._analyse)", "codemods/analysis/gradient_builder.py", "_analyse"),
    ("  float16 models (model_outputs._ModelFacts)", "codemods/analysis/model_outputs.py", "__init__"),
    ("  version guards (VersionGuards.__init__)", "codemods/analysis/version_guards.py", "__init__"),
    ("  fix edits of the findings (fix_edits.per_fix)", "mpfix/fix_edits.py", "per_fix"),
    ("  bindings (bindings.bind / Bindings)", "codemods/analysis/bindings.py", "__init__"),
    ("findings positions (positions_of)", "mpfix/positions.py", "positions_of"),
    ("output (render)", "mpfix/output/__init__.py", "render"),
)


def _group(filename: str) -> str:
    path = filename.replace(os.sep, "/")
    for marker in ("/codemods/analysis/", "/codemods/facts/", "/mpfix/project/"):
        if marker in path:
            return marker.strip("/") + "/" + path.rsplit("/", 1)[-1]
    if "/codemods/" in path:
        name = path.rsplit("/", 1)[-1]
        return ("codemods/" if name.startswith("_") or name in ("base.py", "names.py") else "rule ") + name
    if "/mpfix/" in path:
        return "mpfix/" + path.split("/mpfix/", 1)[1]
    if "/libcst/" in path:
        return "libcst (python)" if not path.split("/libcst/", 1)[1].startswith("_parser") else "libcst parser"
    if filename.startswith("~") or filename.startswith("<built-in"):
        return "builtins / C"
    if "importlib" in path or "<frozen" in path:
        return "import machinery"
    return "stdlib / other"


def _profile(argv: list[str]) -> pstats.Stats:
    profiler = cProfile.Profile()
    profiler.enable()
    from mpfix.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    profiler.disable()
    return pstats.Stats(profiler)


def report(stats: pstats.Stats, top: int) -> None:
    raw = stats.stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    total = sum(tt for _, _, tt, _, _ in raw.values())
    print(f"total self time under the profiler: {total:.2f} s\n\nphases (cumulative; nested ones indented):")
    for label, suffix, func in PHASES:
        cum = sum(ct for (f, _, fn), (_, _, _, ct, _) in raw.items()
                  if fn == func and f.replace(os.sep, "/").endswith(suffix))
        print(f"  {cum:8.2f} s {100 * cum / total:5.1f}%  {label}")
    groups: dict[str, float] = defaultdict(float)
    for (f, _, _), (_, _, tt, _, _) in raw.items():
        groups[_group(f)] += tt
    print("\nself time by module:")
    for name, tt in sorted(groups.items(), key=lambda kv: -kv[1])[:top * 2]:
        print(f"  {tt:8.2f} s {100 * tt / total:5.1f}%  {name}")
    print(f"\ntop {top} functions by self time:")
    rows = sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]
    for (f, line, fn), (_, nc, tt, ct, _) in rows:
        short = f.replace(os.sep, "/").split("/site-packages/")[-1].split("/main/")[-1]
        print(f"  {tt:8.2f} s self {ct:8.2f} s cum {nc:9d} calls  {short}:{line}({fn})")


def _timed(argv: list[str]) -> None:
    """The same check with perf_counter/process_time accumulators on the phases (no profiler)."""
    from mpfix import engine
    from mpfix.project import facts
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    depth = [0]

    def wrap(owner, name, label):
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            if depth[0]:
                return inner(*args, **kwargs)
            depth[0] += 1
            w, c = time.perf_counter(), time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                depth[0] -= 1
                row = spent[label]
                row[0] += time.perf_counter() - w
                row[1] += time.process_time() - c
                row[2] += 1
        setattr(owner, name, timed)

    wrap(engine, "parse_module", "LibCST parse")
    wrap(engine, "visit_batched", "rules + analyses")
    wrap(engine, "file_facts", "project facts")
    wrap(engine.Engine, "_select", "prefilter")
    skipped = [0, 0]
    gated = engine.Engine._gated

    def counted(self, *args, **kwargs):
        kept, asked = gated(self, *args, **kwargs)
        skipped[0] += not kept
        skipped[1] += 1
        return kept, asked
    engine.Engine._gated = counted
    wrap(engine.Engine, "_gated", "gate before the parse")
    wrap(engine, "positions_of", "positions")
    # The parse bound: which parsed texts had a report at all. A first tier that parsed only those (and
    # decided every other text without LibCST) could save at most the rest's parse (issue 18's speed gap).
    parsed: list[tuple[int, float, int]] = []  # (bytes, parse CPU, reports) per parsed text
    run = engine.Engine._run

    def recorded(self, text, *args, **kwargs):
        before = spent["LibCST parse"][1]
        module, context = run(self, text, *args, **kwargs)
        parsed.append((len(text.encode("utf-8", "surrogatepass")), spent["LibCST parse"][1] - before,
                       len(context.reports)))
        return module, context
    engine.Engine._run = recorded
    from mpfix.cli import main
    w, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    w, c = time.perf_counter() - w, time.process_time() - c
    print(f"whole check (after imports of mpfix.cli): {w:.2f} s wall, {c:.2f} s CPU")
    for label, (wall, cpu, calls) in spent.items():
        print(f"  {cpu:7.2f} s CPU {wall:7.2f} s wall {calls:6d} calls  {label}")
    print(f"  the gate left {skipped[0]} of the {skipped[1]} files it was asked about with no rule to run,"
          f" so unparsed (MPFIX_GATE=0: off)")
    found = [row for row in parsed if row[2]]
    print(f"  parse bound: {len(parsed)} texts parsed ({sum(r[0] for r in parsed) / 1e6:.2f} MB,"
          f" {sum(r[1] for r in parsed):.2f} s CPU); {len(found)} of them had a report"
          f" ({sum(r[0] for r in found) / 1e6:.2f} MB, {sum(r[1] for r in found):.2f} s CPU)")
    del facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--policy")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", help="write the raw profile here (pstats / snakeviz)")
    parser.add_argument("--no-profile", action="store_true", help="light phase timers instead of cProfile")
    args = parser.parse_args()
    argv = ["check", args.folder, "--no-cache", "--jobs", "1", "--format", "json"]
    if args.policy:
        argv += ["--policy", args.policy]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    if args.no_profile:
        _timed(argv)
        return
    stats = _profile(argv)
    if args.save:
        stats.dump_stats(args.save)
    report(stats, args.top)


if __name__ == "__main__":
    main()
