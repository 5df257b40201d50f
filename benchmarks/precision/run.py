"""Precision and recall of mpfix on public corpora, against committed judgements.

Runs ``python -m mpfix check CORPUS --format json --no-cache --exit-zero`` on each corpus that is
present (default settings, as a new user would run it), joins the findings with
``judgements.tsv`` and the hazard list ``hazards.tsv`` (both next to this script) and prints:

- per rule and per family (MP1/MP2/MP3): findings, true / false / debatable / not judged, and
  precision = true / (true + false); a finding with no judgement is not shown correct and is
  listed;
- recall: how many hazards of ``hazards.tsv`` a finding of the expected family covers.

No corpus is committed. ``--download`` fetches the missing ones into ``--corpora`` (see README.md).
Usage::

    python benchmarks/precision/run.py                      # run mpfix, report
    python benchmarks/precision/run.py --reuse              # report from the last saved run
    python benchmarks/precision/run.py --policy mixed_float16   # stress mode, reported separately
    python benchmarks/precision/run.py --mpfix /tmp/old     # another mpfix checkout (PYTHONPATH)
    python benchmarks/precision/run.py --unjudged new.tsv   # write skeleton lines to judge
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
JUDGEMENTS = HERE / "judgements.tsv"
HAZARDS = HERE / "hazards.tsv"
VERDICTS = ("true", "false", "debatable")


@dataclass(frozen=True)
class Corpus:
    name: str
    folder: str  # under the corpora root
    target: str  # what mpfix checks, relative to ``folder``
    how: str  # how --download gets it


CORPORA = (
    Corpus("tfm", "tfm", ".", "pip download --no-deps tf-models-official==2.20.0, wheel unzipped"),
    Corpus("keras", "keras", "keras", "the installed keras package (3.15.1), copied"),
    Corpus("tf_keras", "tf_keras", "tf_keras", "the installed tf_keras package (2.21), copied"),
    Corpus("dle", "dle", "TensorFlow2", "NVIDIA/DeepLearningExamples TensorFlow2/ (git archive), git root kept"),
    Corpus("addons", "addons", ".", "tensorflow/addons (git archive of the default branch), its own pyproject.toml"),
    # Issue 18's new corpora (never tuned on): judged in judgements.tsv like the others.
    Corpus("research", "research", "research",
           "tensorflow/models research/ files listed in research_manifest.tsv (laid out by hand), git root kept"),
    Corpus("tfdocs", "tfdocs", ".", "tensorflow/docs (git archive of the default branch), notebooks and scripts"),
    Corpus("tfexamples", "tfexamples", ".", "tensorflow/examples (git archive of the default branch)"),
)
NEW_CORPORA = ("research", "tfdocs", "tfexamples")

BARE_PYPROJECT = '[project]\nname = "corpus-{}"\nversion = "0"\n'


def default_corpora() -> Path:
    return Path(os.environ.get("MPFIX_CORPORA", "/work/corpora"))


# ----------------------------------------------------------------------------- download


def _git_tree(url: str, subdir: str | None, dest: Path, paths: list[str] | None = None) -> None:
    """The newest tree of ``url`` (a URL or a local bare git dir) extracted into ``dest``
    (only ``subdir``, or only ``paths``, when given)."""
    dest.mkdir(parents=True, exist_ok=True)
    if Path(url).is_dir():
        git_dir = url
    else:
        git_dir = str(dest.parent / (dest.name + ".git"))
        subprocess.run(["git", "clone", "--bare", "--depth", "1", url, git_dir], check=True)
    archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "HEAD", *([subdir] if subdir else paths or [])],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def download(root: Path, name: str) -> None:
    dest = root / name
    if dest.exists():
        return
    print(f"downloading {name} into {dest}", file=sys.stderr)
    if name == "tfm":
        tmp = root / "_dl"
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "tf-models-official==2.20.0",
                        "-d", str(tmp)], check=True)
        wheel = next(tmp.glob("tf_models_official-2.20.0-*.whl"))
        dest.mkdir(parents=True)
        shutil.unpack_archive(str(wheel), str(dest), format="zip")
        (dest / "pyproject.toml").write_text(BARE_PYPROJECT.format(name))
    elif name in ("keras", "tf_keras"):
        import importlib.util  # the package's location only: importing keras would import TensorFlow

        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise SystemExit(f"{name} is not installed")
        dest.mkdir(parents=True)
        shutil.copytree(Path(spec.origin).parent, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        (dest / "pyproject.toml").write_text(BARE_PYPROJECT.format(name.replace("_", "-")))
    elif name == "dle":
        _git_tree(os.environ.get("MPFIX_DLE_GIT", "https://github.com/NVIDIA/DeepLearningExamples"),
                  "TensorFlow2", dest)
        # Like a clone: the git root is the project root; each model keeps its Dockerfile/requirements.
        subprocess.run(["git", "init", "-q", str(dest)], check=True)
    elif name == "addons":
        _git_tree(os.environ.get("MPFIX_ADDONS_GIT", "https://github.com/tensorflow/addons"), None, dest)
    elif name in ("tfdocs", "tfexamples"):
        repo = {"tfdocs": "docs", "tfexamples": "examples"}[name]
        _git_tree(os.environ.get(f"MPFIX_{name.upper()}_GIT", f"https://github.com/tensorflow/{repo}"), None, dest)
    elif name == "research":
        # The whole tensorflow/models history is too large to mirror here; a local bare git dir
        # (MPFIX_MODELS_GIT) gives the listed files at HEAD, like a sparse clone.
        git_dir = os.environ.get("MPFIX_MODELS_GIT")
        if not git_dir:
            raise SystemExit("research: set MPFIX_MODELS_GIT to a tensorflow/models git dir, or lay out the "
                             "files of research_manifest.tsv under research/ by hand")
        manifest = [cols[0] for _, cols in read_tsv(HERE / "research_manifest.tsv")]
        _git_tree(git_dir, None, dest, manifest)
        subprocess.run(["git", "init", "-q", str(dest)], check=True)
    else:
        raise SystemExit(f"unknown corpus {name}")


def check_layout(root: Path) -> int:
    """Compare research/ with research_manifest.tsv's chars and sha1 (a hand layout is checked, not trusted)."""
    import hashlib

    bad = 0
    rows = read_tsv(HERE / "research_manifest.tsv")
    for _, cols in rows:
        path = root / "research" / cols[0]
        if not path.exists():
            print(f"missing  {cols[0]}")
            bad += 1
            continue
        data = path.read_bytes()
        if len(cols) >= 4 and (str(len(data.decode("utf-8"))) != cols[2] or hashlib.sha1(data).hexdigest() != cols[3]):
            print(f"differs  {cols[0]} ({len(data.decode('utf-8'))} chars, manifest {cols[2]})")
            bad += 1
    print(f"research layout: {len(rows) - bad}/{len(rows)} files as in research_manifest.tsv")
    return 1 if bad else 0


# ----------------------------------------------------------------------------- findings


def normalized(text: str) -> str:
    return " ".join(text.split())


def text_key(text: str) -> str:
    """A short hash of a source line's text (whitespace-normalized): no third-party code is stored."""
    return hashlib.sha1(normalized(text).encode("utf-8")).hexdigest()[:12]


@dataclass
class Finding:
    corpus: str
    path: str  # relative to the corpus folder, '/'-separated
    cell: int | None
    line: int
    code: str
    message: str
    text: str  # the source line, whitespace-normalized
    fix_sha: str = "-"  # fix_key of the fix offered with it ("-": none)
    applicability: str = "-"

    @property
    def where(self) -> str:
        return f"{self.cell}:{self.line}" if self.cell is not None else str(self.line)

    @property
    def key(self) -> tuple:
        return (self.corpus, self.path, self.code, text_key(self.text))


class Lines:
    """Source lines of files (and notebook cells), read once."""

    def __init__(self) -> None:
        self._files: dict[tuple[str, int | None], list[str]] = {}

    def get(self, filename: str, cell: int | None, line: int) -> str:
        key = (filename, cell)
        if key not in self._files:
            try:
                if cell is None:
                    lines = Path(filename).read_text(encoding="utf-8", errors="replace").splitlines()
                else:
                    cells = json.loads(Path(filename).read_text(encoding="utf-8")).get("cells", [])
                    source = cells[cell - 1].get("source", "") if 0 < cell <= len(cells) else ""
                    lines = ("".join(source) if isinstance(source, list) else source).splitlines()
            except (OSError, ValueError):
                lines = []
            self._files[key] = lines
        lines = self._files[key]
        return normalized(lines[line - 1]) if 0 < line <= len(lines) else ""


def run_mpfix(corpus: Corpus, root: Path, mpfix: str | None, policy: str | None, jobs: int | None) -> tuple[list, float]:
    folder = root / corpus.folder
    cmd = [sys.executable, "-m", "mpfix", "check", corpus.target, "--format", "json", "--no-cache", "--exit-zero"]
    if policy:
        cmd += ["--policy", policy]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    env = dict(os.environ)
    if mpfix:
        env["PYTHONPATH"] = os.pathsep.join([mpfix, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    # Exit 2 with a JSON report: some files could not be read or parsed (MP000 rows), the rest ran.
    if done.returncode != 0 and not (done.returncode == 2 and done.stdout.lstrip().startswith("[")):
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"mpfix failed on {corpus.name} (exit {done.returncode})")
    return json.loads(done.stdout or "[]"), elapsed


def to_findings(corpus: Corpus, root: Path, raw: list, lines: Lines) -> list[Finding]:
    folder = (root / corpus.folder).resolve()
    out = []
    for item in raw:
        filename = Path(item["filename"])
        if not filename.is_absolute():
            filename = folder / corpus.target / filename
        try:
            rel = filename.resolve().relative_to(folder).as_posix()
        except ValueError:
            rel = filename.as_posix()
        row = item["location"]["row"]
        cell = item.get("cell")
        fix = item.get("fix") or None
        out.append(Finding(corpus.name, rel, cell, row, item["code"], item["message"],
                           lines.get(str(filename), cell, row), fix_key(fix),
                           fix.get("applicability", "-") if fix else "-"))
    return out


def fix_key(fix: dict | None) -> str:
    """A short hash of what a fix writes (its edits' contents): a fix verdict holds for that fix only."""
    if not fix:
        return "-"
    text = "\n".join(edit.get("content", "") for edit in fix.get("edits", []))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


# ----------------------------------------------------------------------------- judgements


@dataclass
class Judgement:
    corpus: str
    path: str
    where: str
    code: str
    verdict: str
    text_sha: str
    reason: str
    lineno: int  # in judgements.tsv

    @property
    def key(self) -> tuple:
        return (self.corpus, self.path, self.code, self.text_sha)

    @property
    def row(self) -> int:
        return int(self.where.rsplit(":", 1)[-1])


JUDGEMENT_FIELDS = ("corpus", "path", "line", "code", "verdict", "text_sha", "reason")


def read_tsv(path: Path) -> list[tuple[int, list[str]]]:
    rows = []
    if not path.exists():
        return rows
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        rows.append((number, raw.split("\t")))
    return rows


def read_judgements(path: Path) -> list[Judgement]:
    out = []
    for number, cols in read_tsv(path):
        if cols[0] == "corpus":
            continue
        if len(cols) != len(JUDGEMENT_FIELDS):
            raise SystemExit(f"{path}:{number}: expected {len(JUDGEMENT_FIELDS)} tab-separated fields, got {len(cols)}")
        corpus, rel, where, code, verdict, sha, reason = cols
        if verdict not in VERDICTS:
            raise SystemExit(f"{path}:{number}: verdict must be one of {VERDICTS}, not {verdict!r}")
        out.append(Judgement(corpus, rel, where, code, verdict, sha, reason, number))
    return out


def join(findings: list[Finding], judgements: list[Judgement]) -> tuple[dict[int, Judgement], list[Judgement]]:
    """Finding index → its judgement (same corpus, path, code and line text; nearest line wins,
    each judgement used once), and the judgements that matched no finding (stale)."""
    by_key: dict[tuple, list[Judgement]] = collections.defaultdict(list)
    for j in judgements:
        by_key[j.key].append(j)
    matched: dict[int, Judgement] = {}
    used: set[int] = set()
    # Exact line first, then nearest, so two findings on identical lines keep their own verdicts.
    order = sorted(range(len(findings)), key=lambda i: (findings[i].corpus, findings[i].path, findings[i].line))
    for exact in (True, False):
        for i in order:
            if i in matched:
                continue
            f = findings[i]
            candidates = [j for j in by_key.get(f.key, ()) if j.lineno not in used]
            if exact:
                candidates = [j for j in candidates if j.where == f.where]
            if not candidates:
                continue
            best = min(candidates, key=lambda j: abs(j.row - f.line))
            matched[i] = best
            used.add(best.lineno)
    stale = [j for j in judgements if j.lineno not in used]
    return matched, stale


# ----------------------------------------------------------------------------- fix verdicts

FIXES = HERE / "fix_judgements.tsv"
FIX_FIELDS = ("corpus", "path", "line", "code", "mode", "fix", "applicability", "text_sha", "fix_sha", "reason")


def read_fix_verdicts(path: Path) -> dict[tuple, list[tuple[int, str]]]:
    """(corpus, path, code, text_sha, fix_sha) -> [(row, verdict)]; verdict is right/harmless/wrong."""
    out: dict[tuple, list[tuple[int, str]]] = collections.defaultdict(list)
    for number, cols in read_tsv(path):
        if cols[0] == "corpus":
            continue
        if len(cols) != len(FIX_FIELDS):
            raise SystemExit(f"{path}:{number}: expected {len(FIX_FIELDS)} tab-separated fields, got {len(cols)}")
        corpus, rel, where, code, _mode, verdict, _app, sha, fsha, _reason = cols
        kind = verdict.split(":")[0].strip()
        if kind not in ("right", "harmless", "wrong", "-"):
            raise SystemExit(f"{path}:{number}: fix must be right/harmless/wrong[: why]/-, not {verdict!r}")
        out[(corpus, rel, code, sha, fsha)].append((int(where.rsplit(":", 1)[-1]), kind))
    return out


def fix_counts(findings: list[Finding], verdicts: dict) -> dict[str, collections.Counter]:
    """Per corpus: right / harmless / wrong / unjudged fixes (and wrong ones marked safe)."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for f in findings:
        if f.fix_sha == "-":
            continue
        entries = verdicts.get((f.corpus, f.path, f.code, text_key(f.text), f.fix_sha), [])
        kind = min(entries, key=lambda e: abs(e[0] - f.line))[1] if entries else "unjudged"
        for group in (f.corpus, "all"):
            counts[group][kind] += 1
            if kind == "wrong" and f.applicability == "safe":
                counts[group]["wrong-safe"] += 1
    return counts


def print_fix_counts(counts: dict[str, collections.Counter]) -> None:
    print("\nfixes offered (fix_judgements.tsv): right / harmless / wrong (of them safe) / unjudged")
    for group in sorted(counts, key=lambda g: (g == "all", g)):
        c = counts[group]
        print(f"  {group:<11} {c['right']:>4} / {c['harmless']:>4} / {c['wrong']:>3} ({c['wrong-safe']}) / {c['unjudged']}")


# ----------------------------------------------------------------------------- hazards


@dataclass
class Hazard:
    ident: str
    corpus: str
    path: str
    first: int
    last: int
    family: str  # MP1 / MP2 / MP3, or a code
    reach: str  # entry / library
    reason: str
    cell: int | None = None  # notebooks: first/last are rows of this cell ("cell:row" in the file)


def read_hazards(path: Path) -> list[Hazard]:
    out = []
    for number, cols in read_tsv(path):
        if cols[0] == "id":
            continue
        if len(cols) != 8:
            raise SystemExit(f"{path}:{number}: expected 8 tab-separated fields, got {len(cols)}")
        ident, corpus, rel, first, last, family, reach, reason = cols
        if reach not in ("entry", "library"):
            raise SystemExit(f"{path}:{number}: reach must be entry or library, not {reach!r}")
        cell = None
        if ":" in first:  # a notebook cell: "cell:row" .. "cell:row"
            cell, first, last = int(first.split(":")[0]), first.split(":")[1], last.split(":")[-1]
        out.append(Hazard(ident, corpus, rel, int(first), int(last), family, reach, reason, cell))
    return out


def covers(f: Finding, h: Hazard) -> bool:
    return (f.corpus == h.corpus and f.path == h.path and f.cell == h.cell
            and h.first <= f.line <= h.last and f.code.startswith(h.family))


def checkout(commit: str) -> tuple[str, str]:
    """(folder, short sha): mpfix as of ``commit``, importable from the folder (the rules folder
    codemods/ is installed as mpfix.codemods, so it is linked there)."""
    import tempfile

    repo = HERE.parent.parent
    rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", commit], check=True,
                         capture_output=True, text=True).stdout.strip()
    dest = Path(tempfile.gettempdir()) / f"mpfix-{rev}"
    if not (dest / "mpfix").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "mpfix", "codemods"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        (dest / "mpfix" / "codemods").symlink_to(Path("..") / "codemods")
    return str(dest), rev


# ----------------------------------------------------------------------------- report


def precision(t: int, f: int) -> str:
    return f"{100.0 * t / (t + f):5.1f}%" if t + f else "    -"


def report(findings: list[Finding], matched: dict[int, Judgement], title: str) -> dict:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for i, f in enumerate(findings):
        verdict = matched[i].verdict if i in matched else "unjudged"
        for group in (f.code, f.code[:3], "all"):
            counts[group][verdict] += 1
            counts[group]["n"] += 1
    print(f"\n== {title}")
    print(f"{'rule':<7}{'n':>6}{'true':>6}{'false':>6}{'debat':>6}{'unjud':>6}  precision  per-corpus")
    per_corpus: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for f in findings:
        per_corpus[f.code][f.corpus] += 1
    rules = sorted(k for k in counts if k.startswith("MP") and len(k) > 3)
    families = sorted(k for k in counts if k.startswith("MP") and len(k) == 3)
    for group in rules + [None] + families + ["all"]:
        if group is None:
            print("-" * 60)
            continue
        c = counts[group]
        spread = " ".join(f"{k}={v}" for k, v in sorted(per_corpus.get(group, {}).items()))
        print(f"{group:<7}{c['n']:>6}{c['true']:>6}{c['false']:>6}{c['debatable']:>6}{c['unjudged']:>6}"
              f"  {precision(c['true'], c['false'])}    {spread}")
    return {k: dict(v) for k, v in counts.items()}


def saved_findings(root: Path, results: Path, label: str, wanted) -> list[Finding]:
    lines = Lines()
    findings: list[Finding] = []
    for corpus in wanted:
        saved = results / label / f"{corpus.name}.json"
        if saved.exists():
            findings += to_findings(corpus, root, json.loads(saved.read_text()), lines)
    return findings


def markdown(root: Path, results: Path, labels: list[str], wanted) -> str:
    """Per rule and family: findings, true/false/debatable/unjudged and precision of each saved run."""
    judgements = read_judgements(JUDGEMENTS)
    hazards = [h for h in read_hazards(HAZARDS) if h.corpus in {c.name for c in wanted}]
    verdicts = read_fix_verdicts(FIXES)
    tables = []
    for label in labels:
        findings = saved_findings(root, results, label, wanted)
        matched, _ = join(findings, judgements)
        counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for i, f in enumerate(findings):
            verdict = matched[i].verdict if i in matched else "unjudged"
            for group in (f.code, f.code[:3] + "xx", "all"):
                counts[group][verdict] += 1
        present = {c.name for c in wanted}
        found = [h for h in hazards if h.corpus in present and any(covers(f, h) for f in findings)]
        tables.append((counts, found, fix_counts(findings, verdicts)["all"]))
    groups = sorted({g for counts, _, _ in tables for g in counts if g != "all"},
                    key=lambda g: (g.endswith("xx"), g)) + ["all"]
    head = "| rule | " + " | ".join(f"{lab}: n (T/F/D/?) | precision" for lab in labels) + " |"
    out = [head, "|" + "---|" * (1 + 2 * len(labels))]
    for group in groups:
        cells = []
        for counts, _, _ in tables:
            c = counts.get(group, collections.Counter())
            n = sum(c.values())
            cells.append(f"{n} ({c['true']}/{c['false']}/{c['debatable']}/{c['unjudged']})" if n else "0")
            cells.append(precision(c["true"], c["false"]).strip() if n else "-")
        name = f"**{group}**" if group.endswith("xx") or group == "all" else group
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    entry = [h for h in hazards if h.reach == "entry"]
    for name, subset in (("recall, all hazards", hazards), ("recall, reach=entry", entry)):
        cells = []
        for _, found, _ in tables:
            n = sum(h in found for h in subset)
            cells.append(f"{n}/{len(subset)} | {100.0 * n / max(1, len(subset)):.1f}%")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for _, _, fixes in tables:
        cells.append(f"{fixes['right']}/{fixes['harmless']}/{fixes['wrong']} ({fixes['wrong-safe']} safe)/"
                     f"{fixes['unjudged']} | -")
    out.append("| fixes right/harmless/wrong/unjudged | " + " | ".join(cells) + " |")
    return "\n".join(out)


def per_corpus_markdown(root: Path, results: Path, labels: list[str], wanted) -> str:
    """One row per corpus and saved run: precision per family, hazard recall and fix verdicts."""
    judgements = read_judgements(JUDGEMENTS)
    hazards = read_hazards(HAZARDS)
    verdicts = read_fix_verdicts(FIXES)
    out = ["| corpus | run | findings (T/F/D/?) | MP1 | MP2 | MP3 | recall (entry) | fixes right/harmless/wrong (safe) |",
           "|---|---|---|---|---|---|---|---|"]
    for corpus in wanted:
        for label in labels:
            findings = saved_findings(root, results, label, [corpus])
            if not findings and not (results / label / f"{corpus.name}.json").exists():
                continue
            matched, _ = join(findings, judgements)
            fam: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
            for i, f in enumerate(findings):
                verdict = matched[i].verdict if i in matched else "unjudged"
                fam[f.code[:3]][verdict] += 1
                fam["all"][verdict] += 1
            cells = []
            for family in ("MP1", "MP2", "MP3"):
                c = fam.get(family)
                cells.append(f"{c['true']}/{c['true'] + c['false']}" + (f" +{c['debatable']}d" if c["debatable"] else "")
                             if c else "-")
            mine = [h for h in hazards if h.corpus == corpus.name]
            found = [h for h in mine if any(covers(f, h) for f in findings)]
            entry = [h for h in mine if h.reach == "entry"]
            recall = f"{len(found)}/{len(mine)} ({sum(h in found for h in entry)}/{len(entry)})" if mine else "-"
            fx = fix_counts(findings, verdicts).get(corpus.name, collections.Counter())
            a = fam["all"]
            out.append(f"| {corpus.name} | {label} | {len(findings)} ({a['true']}/{a['false']}/{a['debatable']}/"
                       f"{a['unjudged']}) | " + " | ".join(cells) + f" | {recall} | {fx['right']}/{fx['harmless']}/"
                       f"{fx['wrong']} ({fx['wrong-safe']})" + (f", {fx['unjudged']} unjudged" if fx["unjudged"] else "")
                       + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=default_corpora(), help="corpora root (MPFIX_CORPORA)")
    parser.add_argument("--only", default="", help="comma-separated corpus names (default: all present)")
    parser.add_argument("--download", action="store_true", help="fetch the corpora that are missing")
    parser.add_argument("--check-layout", action="store_true",
                        help="compare research/ with research_manifest.tsv (chars, sha1) and exit")
    parser.add_argument("--policy", choices=["mixed_float16"], help="stress mode: force the policy")
    parser.add_argument("--mpfix", help="run this mpfix checkout (prepended to PYTHONPATH)")
    parser.add_argument("--commit", help="run mpfix as of this commit of the repository (git archive into a temp dir)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--results", type=Path, help="where raw JSON runs are saved (default CORPORA/_results)")
    parser.add_argument("--label", default="current", help="name of the saved run")
    parser.add_argument("--reuse", action="store_true", help="report from the saved run, do not run mpfix")
    parser.add_argument("--unjudged", type=Path, help="write skeleton judgement lines for unjudged findings")
    parser.add_argument("--list-unjudged", type=int, default=40, help="how many unjudged findings to print")
    parser.add_argument("--json", type=Path, help="write the counts as JSON")
    parser.add_argument("--markdown", metavar="LABEL,LABEL", help="print a markdown table comparing saved runs and exit")
    parser.add_argument("--per-corpus", metavar="LABEL,LABEL", help="print a per-corpus markdown table of saved runs and exit")
    args = parser.parse_args(argv)

    root = args.corpora
    if args.check_layout:
        return check_layout(root)
    if args.commit:
        args.mpfix, rev = checkout(args.commit)
        if args.label == "current":
            args.label = rev
    results = args.results or root / "_results"
    label = args.label + (f"-{args.policy}" if args.policy else "")
    wanted = [c for c in CORPORA if not args.only or c.name in args.only.split(",")]
    if args.markdown:
        print(markdown(root, results, args.markdown.split(","), wanted))
        return 0
    if args.per_corpus:
        print(per_corpus_markdown(root, results, args.per_corpus.split(","), wanted))
        return 0
    lines = Lines()
    findings: list[Finding] = []
    timings = {}
    for corpus in wanted:
        if args.download:
            download(root, corpus.folder)
        if not (root / corpus.folder / corpus.target).exists():
            print(f"skipping {corpus.name}: {root / corpus.folder} is absent ({corpus.how}; --download)",
                  file=sys.stderr)
            continue
        saved = results / label / f"{corpus.name}.json"
        if args.reuse and saved.exists():
            raw = json.loads(saved.read_text())
        else:
            raw, timings[corpus.name] = run_mpfix(corpus, root, args.mpfix, args.policy, args.jobs)
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(raw))
        findings += to_findings(corpus, root, raw, lines)
    if timings:
        print("mpfix check wall time: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))

    judgements = read_judgements(JUDGEMENTS)
    matched, stale = join(findings, judgements)
    title = f"{label}: {len(findings)} findings, {len(matched)} judged" + (
        " (stress mode: --policy mixed_float16)" if args.policy else " (default settings)")
    counts = report(findings, matched, title)

    hazards = read_hazards(HAZARDS)
    if hazards:
        present = {f.corpus for f in findings} | {c.name for c in wanted if (root / c.folder).exists()}
        considered = [h for h in hazards if h.corpus in present]
        found = [h for h in considered if any(covers(f, h) for f in findings)]
        missed = [h for h in considered if h not in found]
        print(f"\nrecall on hazards.tsv: {len(found)}/{len(considered)}"
              f" ({100.0 * len(found) / max(1, len(considered)):.1f}%)")
        fam = collections.defaultdict(lambda: [0, 0])
        for h in considered:
            fam[h.family[:3]][1] += 1
            fam[h.family[:3]][0] += h in found
        print("  by family: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in sorted(fam.items())))
        entry = [h for h in considered if h.reach == "entry"]
        print(f"  reach=entry (the corpus runs it under float16): {sum(h in found for h in entry)}/{len(entry)};"
              f" reach=library: {sum(h in found for h in considered if h.reach == 'library')}"
              f"/{len(considered) - len(entry)}")
        for h in missed:
            print(f"  missed {h.ident} {h.corpus}/{h.path}:{h.first}-{h.last} {h.family} ({h.reach}): {h.reason}")
        counts["recall"] = {"found": len(found), "hazards": len(considered), "missed": [h.ident for h in missed]}

    fixes = fix_counts(findings, read_fix_verdicts(FIXES))
    print_fix_counts(fixes)
    counts["fixes"] = {k: dict(v) for k, v in fixes.items()}

    print(f"\njudgements: {len(judgements)} in {JUDGEMENTS.name}, {len(stale)} match no current finding (stale)")
    unjudged = [f for i, f in enumerate(findings) if i not in matched]
    if unjudged:
        print(f"not yet judged ({len(unjudged)}; they count as not shown correct):")
        for f in unjudged[: args.list_unjudged]:
            print(f"  {f.corpus}/{f.path}:{f.where} {f.code} {f.message[:110]}")
        if len(unjudged) > args.list_unjudged:
            print(f"  ... {len(unjudged) - args.list_unjudged} more (--unjudged FILE writes them all)")
    if args.unjudged:
        with args.unjudged.open("w", encoding="utf-8") as out:
            for f in unjudged:
                out.write("\t".join([f.corpus, f.path, f.where, f.code, "?", text_key(f.text),
                                     " ".join(f.message.split()) + " ## " + f.text]) + "\n")
    if args.json:
        args.json.write_text(json.dumps(counts, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
