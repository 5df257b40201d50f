"""How many files a default-mode run leaves unchecked for float16, and what checking them would find.

For each corpus of ``benchmarks/precision`` that is present, runs mpfix twice (``--no-cache``):

- default settings, ``--format json-run``: the files the float16 rules skipped because no mixed
  policy reaches them (``run.float16Unchecked``), and whether the project sets mixed_float16 at all;
- ``--policy mixed_float16`` (stress mode): the float16 findings (rules with ``requires_float16``)
  in exactly those files, joined with ``benchmarks/precision/judgements.tsv``.

It prints, per corpus, the unchecked files, how many of them have a float16 finding in stress mode,
and the judged precision of those findings split by where the file sits (test, package module,
script/notebook); and, of the hazards of ``hazards.tsv`` the default run misses, how many lie in the
files the hint names: the evidence for what a library project's default should be (issue 23).

    python benchmarks/unchecked/run.py [--corpora DIR] [--only tfm,keras] [--reuse]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "precision"))
import run as precision  # noqa: E402  (the corpora, judgements and join of the precision benchmark)

RESULTS = "_results/unchecked"


def mpfix(corpus, root: Path, *extra: str) -> dict | list:
    cmd = [sys.executable, "-m", "mpfix", "check", corpus.target, "--no-cache", "--exit-zero", *extra]
    done = subprocess.run(cmd, cwd=root / corpus.folder, capture_output=True, text=True)
    if done.returncode not in (0, 2) or not done.stdout.strip():
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"mpfix failed on {corpus.name} (exit {done.returncode})")
    return json.loads(done.stdout)


def float16_codes() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "mpfix", "rules", "--format", "json"], capture_output=True,
                         text=True, check=True).stdout
    return {r["code"] for r in json.loads(out) if r["requires_float16"]}


def kind(path: str) -> str:
    name = os.path.basename(path)
    parts = path.split("/")
    if name.startswith("test_") or name.endswith("_test.py") or "tests" in parts or name == "conftest.py":
        return "test"
    if path.endswith(".ipynb"):
        return "notebook"
    return "module"  # refined below by whether its folder is a package


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpora", type=Path, default=precision.default_corpora())
    parser.add_argument("--only", default="")
    parser.add_argument("--reuse", action="store_true", help="report from the saved runs")
    args = parser.parse_args(argv)
    wanted = set(filter(None, args.only.split(",")))
    codes = float16_codes()
    judgements = precision.read_judgements(precision.JUDGEMENTS)
    totals = collections.Counter()
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    hazards = precision.read_hazards(precision.HAZARDS)
    missed: list[str] = []
    print("corpus\tfiles\tunchecked\tlibrary\twith-float16-finding\tfindings\tT/F/D/?")
    for corpus in precision.CORPORA:
        if (wanted and corpus.name not in wanted) or not (args.corpora / corpus.folder).exists():
            continue
        saved = args.corpora / RESULTS / f"{corpus.name}.json"
        if args.reuse and saved.exists():
            data = json.loads(saved.read_text())
        else:
            data = {"default": mpfix(corpus, args.corpora, "--format", "json-run"),
                    "stress": mpfix(corpus, args.corpora, "--format", "json", "--policy", "mixed_float16")}
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(data))
        run = data["default"]["run"]
        meta = run["float16Unchecked"] or {"paths": [], "library": False}
        unchecked = {str(Path(p).resolve()) for p in meta["paths"]}
        stress = [i for i in data["stress"] if i["code"] in codes and str(Path(i["filename"]).resolve()) in unchecked]
        findings = precision.to_findings(corpus, args.corpora, stress, precision.Lines())
        matched, _ = precision.join(findings, judgements)
        verdicts = collections.Counter(matched[i].verdict if i in matched else "?" for i in range(len(findings)))
        for i, f in enumerate(findings):
            where = kind(f.path)
            if where == "module":
                folder = args.corpora / corpus.folder / os.path.dirname(f.path)
                where = "package module" if (folder / "__init__.py").exists() else "script"
            by_kind[where][matched[i].verdict if i in matched else "?"] += 1
        folder = (args.corpora / corpus.folder).resolve()
        named = {Path(p).resolve().relative_to(folder).as_posix() for p in unchecked}
        found = precision.to_findings(corpus, args.corpora, data["default"]["findings"], precision.Lines())
        stressed = precision.to_findings(corpus, args.corpora, data["stress"], precision.Lines())
        for h in hazards:
            if h.corpus == corpus.name and not any(precision.covers(f, h) for f in found):
                totals["missed"] += 1
                totals["missed, named"] += h.path in named
                totals["missed, named, found in stress"] += h.path in named and any(
                    precision.covers(f, h) for f in stressed)
                missed.append(f"  {h.ident} {corpus.name} {h.path} ({h.reach}): "
                              f"{'named by the hint' if h.path in named else 'not named (reached, or no float16 rule triggers)'}")
        with_finding = len({f.path for f in findings})
        print(f"{corpus.name}\t{run['filesChecked']}\t{len(unchecked)}\t{meta['library']}\t{with_finding}\t"
              f"{len(findings)}\t{verdicts['true']}/{verdicts['false']}/{verdicts['debatable']}/{verdicts['?']}")
        totals.update({"files": run["filesChecked"], "unchecked": len(unchecked), "with": with_finding,
                       "findings": len(findings), **verdicts})
    print(f"all\t{totals['files']}\t{totals['unchecked']}\t-\t{totals['with']}\t{totals['findings']}\t"
          f"{totals['true']}/{totals['false']}/{totals['debatable']}/{totals['?']}")
    print(f"\nhazards the default run misses: {totals['missed']}; in files the hint names: {totals['missed, named']} "
          f"(found by the --policy mixed_float16 run it suggests: {totals['missed, named, found in stress']})")
    print("\n".join(missed))
    print("\nstress-mode float16 findings in unchecked files, by where the file sits (T/F/D/?):")
    for where, c in sorted(by_kind.items()):
        judged = c["true"] + c["false"]
        share = f"{100 * c['true'] / judged:.1f}%" if judged else "-"
        print(f"  {where}: {c['true']}/{c['false']}/{c['debatable']}/{c['?']}  precision {share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
