"""Score `mpfix check` on the held-out scripts of this folder against MANIFEST.tsv.

A finding matches a seeded bug when it is in the same file on the bug's line or on one of the
lines in `also` (another place where the same bug can be reported and fixed, e.g. the float16
output layer of a loss that overflows). Unmatched findings are false positives.

    python benchmarks/unseen/score.py [--json FILE] [--policy mixed_float16]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Bug:
    file: str
    lines: frozenset[int]
    line: int
    cls: str


def load_manifest() -> tuple[list[Bug], set[str]]:
    bugs, correct = [], set()
    with open(HERE / "MANIFEST.tsv", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if row["class"] == "correct":
                correct.add(row["file"])
                continue
            also = {int(n) for n in row["also"].split(",") if n.strip()}
            bugs.append(Bug(row["file"], frozenset({int(row["line"])} | also), int(row["line"]), row["class"]))
    return bugs, correct


def run_check(policy: str | None) -> list[dict]:
    cmd = [sys.executable, "-m", "mpfix", "check", str(HERE), "--no-cache", "--format", "json"]
    if policy:
        cmd += ["--policy", policy]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(f"mpfix check failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="read findings from this `--format json` file instead of running check")
    parser.add_argument("--policy", help="pass --policy to mpfix check")
    args = parser.parse_args()
    bugs, correct = load_manifest()
    findings = json.loads(args.json.read_text()) if args.json else run_check(args.policy)
    found: dict[Bug, list[str]] = defaultdict(list)
    false_positives = []
    for finding in findings:
        name = Path(finding["filename"]).name
        row = finding["location"]["row"]
        hits = [bug for bug in bugs if bug.file == name and row in bug.lines]
        label = f"{name}:{row} {finding['code']}"
        for bug in hits:
            found[bug].append(label)
        if not hits:
            false_positives.append(label + (" (correct script)" if name in correct else ""))
    per_class: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for bug in bugs:
        per_class[bug.cls][1] += 1
        per_class[bug.cls][0] += bug in found
    print("class                      found/seeded")
    for cls, (hit, total) in sorted(per_class.items()):
        print(f"  {cls:<25} {hit}/{total}")
    matched = len(findings) - len(false_positives)
    print(f"recall    {len(found)}/{len(bugs)} = {len(found) / len(bugs):.0%}")
    print(f"precision {matched}/{len(findings)} = {matched / max(len(findings), 1):.0%}")
    for bug in bugs:
        if bug not in found:
            print(f"MISS {bug.file}:{bug.line} {bug.cls}")
    for label in false_positives:
        print(f"FP   {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
