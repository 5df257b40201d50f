"""Soundness of the per-rule gate before the LibCST parse (``mpfix.prechecks``, ``Rule.needs``) on real code.

Checks every file of the given folders with the gate off (``engine.GATE = False``), recording per linted text
the rules selected and the rules that reported (before suppressions), and per file its errors; then asks
``prechecks.held`` about the same text. A (file, rule) the gate would drop where the rule reported, or where
the run raised, is UNSOUND; a file where every rule is dropped and the run reported an error is UNSOUND too.

usage: python benchmarks/twotier_soundness.py [--policy mixed_float16] FOLDER...
Exit status 1 when anything is unsound. Each folder is its own project (as ``mpfix check FOLDER`` sees it).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.setrecursionlimit(10000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default=None)
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)

    from mpfix import engine as engine_module, policy as policies, prechecks, runner
    from mpfix.codemods import all_rules
    from mpfix.discovery import discover
    from mpfix.engine import Options
    from mpfix.jobs import Job, Mode
    from mpfix.parsing import TooComplex
    from mpfix.project.facts import file_facts

    engine_module.GATE = False
    policies.use_store(None)
    rules = all_rules()
    needs = {r.code: r.needs for r in rules}
    job = Job(rule_codes=tuple(r.code for r in rules), options=Options(policy=args.policy), mode=Mode.CHECK)
    rows: list[dict] = []
    original = engine_module.Engine._run

    def recording(self, text, path, selected, *rest, **keywords):
        row = {"path": path, "text": text, "rules": [r.code for r in selected], "found": None}
        rows.append(row)
        module, context = original(self, text, path, selected, *rest, **keywords)
        row["found"] = {r.code for r, _ in context.reports}
        return module, context

    engine_module.Engine._run = recording
    errors: dict[str, list[str]] = {}
    files = 0
    for folder in args.folders:
        for path in discover([folder]):
            files += 1
            result = runner.process_file(path, job)
            if result.errors:
                errors[str(path)] = [e.message for e in result.errors]
    engine_module.Engine._run = original

    unsound, dropped, skipped, texts = [], collections.Counter(), 0, 0
    started = time.process_time()
    for row in rows:
        want = frozenset().union(*(needs[c] for c in row["rules"]))
        if not want:
            continue
        texts += 1
        try:
            cross = file_facts(row["path"], consult_project=args.policy is None).cross_calls
            held = prechecks.held(row["text"], row["path"], want, cross)
        except TooComplex:
            continue
        if held is None:
            continue
        gone = [c for c in row["rules"] if not needs[c] <= held]
        for code in gone:
            dropped[code] += 1
            if row["found"] is None or code in row["found"]:
                unsound.append((str(row["path"]), code, row["found"]))
        if gone and len(gone) == len(row["rules"]):
            skipped += 1
            if errors.get(str(row["path"])):
                unsound.append((str(row["path"]), "error", errors[str(row["path"])]))
    print(f"policy {args.policy} files {files} texts with a declaring rule {texts} not parsed {skipped} "
          f"dropped {dict(sorted(dropped.items()))} prechecks {time.process_time() - started:.1f}s "
          f"unsound {len(unsound)}")
    for item in unsound:
        print("UNSOUND", *item)
    return 1 if unsound else 0


if __name__ == "__main__":
    sys.exit(main())
