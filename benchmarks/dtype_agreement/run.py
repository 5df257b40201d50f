"""Does mpfix's static dtype model agree with TensorFlow? A kept number, like the precision benchmark.

Traces small models under mixed_float16 on both Keras generations with real TensorFlow
(``trace.py``: keras.applications and tf_keras.applications models, a ResNet block, an attention
block, tf-models-official NLP layers, ``samples/*.py`` and ``tests/verify/scripts/*.py``), reads
every op's output dtype and the source line that created it, and compares it with the dtype mpfix's
facts give the expression the rules read at that line (``static.py``). Reports agree / unknown /
wrong per op class and per source group; expressions outside the code the float16 rules analyse are
counted apart ("outside"). Usage::

    python benchmarks/dtype_agreement/run.py                 # trace (both generations) and report
    python benchmarks/dtype_agreement/run.py --reuse         # report from the saved traces
    python benchmarks/dtype_agreement/run.py --only 3        # Keras 3 only
    python benchmarks/dtype_agreement/run.py --json results.json --markdown table.md
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import static  # noqa: E402  (this folder's module)

# Harness scripts of the verify tests that build no model (they hang, exit, raise on purpose).
NOT_MODELS = {"hang.py", "sleeps.py", "raises.py", "exits.py", "abrupt.py", "no_steps.py", "graph_error.py",
              "reads_stdin.py"}
VERDICTS = ("agree", "unknown", "python", "wrong", "outside")


def scripts() -> dict[int, list[str]]:
    """samples/*.py and tests/verify/scripts/*.py by Keras generation (tf_keras scripts say so)."""
    found: dict[int, list[str]] = {2: [], 3: []}
    for folder in (REPO / "samples", REPO / "tests" / "verify" / "scripts"):
        for path in sorted(folder.glob("*.py")):
            if path.name in NOT_MODELS:
                continue
            text = path.read_text(encoding="utf-8")
            legacy = "TF_USE_LEGACY_KERAS" in text or "import tf_keras" in text
            found[2 if legacy else 3].append(str(path))
    return found


def trace(generation: int, out: Path, tfm: Path | None, timeout: int) -> dict:
    env = dict(os.environ)
    env.pop("TF_USE_LEGACY_KERAS", None)
    targets = "apps,layers,scripts"
    if generation == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
        if tfm and (tfm / "official").is_dir():
            env["PYTHONPATH"] = os.pathsep.join([str(tfm), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            targets += ",tfm"
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [sys.executable, str(HERE / "trace.py"), "--generation", str(generation), "--targets", targets,
           "--scripts", ",".join(scripts()[generation]), "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not out.exists():
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"trace.py failed for generation {generation} (exit {done.returncode})")
    print(f"generation {generation}: traced in {time.perf_counter() - start:.0f}s", file=sys.stderr)
    return json.loads(out.read_text())


def checkout(commit: str) -> str:
    """A folder with mpfix as of ``commit`` (the precision benchmark's checkout, shared with it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("precision_run", REPO / "benchmarks" / "precision" / "run.py")
    precision = importlib.util.module_from_spec(spec)
    sys.modules["precision_run"] = precision  # dataclasses look their module up
    spec.loader.exec_module(precision)
    folder, _ = precision.checkout(commit)
    return folder


def short(path: str) -> str:
    """A path as the reader knows it: inside its package (keras/src/...), the corpus or the repository."""
    p = path.replace("\\", "/")
    for marker in ("/site-packages/", str(REPO) + "/", "/corpora/tfm/"):
        if marker in p:
            return p.split(marker, 1)[1]
    return p


def group_of(path: str) -> str:
    p = path.replace("\\", "/")
    if "/tf_keras/src/" in p:
        return "tf_keras library"
    if "/keras/src/" in p:
        return "keras 3 library"
    if "/official/" in p:
        return "tf-models-official"
    if "/samples/" in p:
        return "samples"
    return "test scripts"


def compare(traces: dict[int, dict]) -> tuple[list[tuple[int, static.Pair]], collections.Counter]:
    stats: collections.Counter = collections.Counter()
    pairs: list[tuple[int, static.Pair]] = []
    for generation, data in sorted(traces.items()):
        by_file: dict[str, list[dict]] = collections.defaultdict(list)
        for rec in data["records"]:
            by_file[rec["file"]].append(rec)
        for path, recs in sorted(by_file.items()):
            pairs += [(generation, p) for p in static.pair_file(path, recs, generation, stats)]
    return pairs, stats


def tables(pairs: list[tuple[int, static.Pair]]) -> dict:
    out: dict = {"by_class": {}, "by_group": {}, "total": collections.Counter()}
    for generation, p in pairs:
        v = static.verdict(p)
        for key, bucket in ((f"keras {generation}: {p.klass}", "by_class"),
                            (f"keras {generation}: {group_of(p.file)}", "by_group")):
            out[bucket].setdefault(key, collections.Counter())[v] += 1
        out["total"][v] += 1
        out["total"][f"keras {generation} {v}"] += 1
    return out


def rate(c: collections.Counter) -> str:
    inside = sum(c[v] for v in ("agree", "unknown", "python", "wrong"))
    if not inside:
        return "-"
    return f"{100.0 * c['agree'] / inside:.1f}% agree, {100.0 * (c['unknown'] + c['python']) / inside:.1f}% unknown"


def markdown(result: dict) -> str:
    lines = []
    for title, bucket in (("per op class", "by_class"), ("per source", "by_group")):
        lines += [f"**{title}**", "", "| where | agree | unknown | python | wrong | outside | rate |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for key, c in sorted(result[bucket].items()):
            c = collections.Counter(c)
            lines.append(f"| {key} | " + " | ".join(str(c[v]) for v in VERDICTS) + f" | {rate(c)} |")
        lines.append("")
    t = collections.Counter(result["total"])
    lines.append("| **all** | " + " | ".join(str(t[v]) for v in VERDICTS) + f" | {rate(t)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("2", "3"), help="one Keras generation")
    parser.add_argument("--reuse", action="store_true", help="compare the saved traces again")
    parser.add_argument("--traces", type=Path, default=Path(os.environ.get("MPFIX_CORPORA", "/work/corpora"))
                        / "_results" / "dtype_agreement", help="where the raw traces are kept")
    parser.add_argument("--tfm", type=Path, default=Path(os.environ.get("MPFIX_CORPORA", "/work/corpora")) / "tfm",
                        help="unzipped tf-models-official wheel (its NLP layers are traced when present)")
    parser.add_argument("--timeout", type=int, default=1500)
    parser.add_argument("--commit", help="read the static facts of mpfix as of this commit (git archive to a temp dir)")
    parser.add_argument("--json", type=Path, help="write the counts and every wrong/unknown pair")
    parser.add_argument("--markdown", type=Path, help="write the markdown tables")
    parser.add_argument("--list", type=int, default=40, help="how many wrong pairs to print")
    args = parser.parse_args(argv)
    if args.commit:
        sys.path.insert(0, checkout(args.commit))
    args.traces.mkdir(parents=True, exist_ok=True)
    traces = {}
    for generation in ((2, 3) if not args.only else (int(args.only),)):
        out = args.traces / f"keras{generation}.json"
        if args.reuse and out.exists():
            traces[generation] = json.loads(out.read_text())
        else:
            traces[generation] = trace(generation, out, args.tfm, args.timeout)
    pairs, stats = compare(traces)
    result = tables(pairs)
    result["stats"] = dict(stats)
    result["status"] = {g: t["status"] for g, t in traces.items()}
    text = markdown(result)
    print(text)
    print("\nrecords: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    for g, status in result["status"].items():
        bad = {k: v for k, v in status.items() if not v.startswith(("ok", "exit 0"))}
        print(f"keras {g}: {len(status)} targets, not traced: {bad or 'none'}")
    wrong = [(g, p) for g, p in pairs if static.verdict(p) == "wrong"]
    print(f"\nwrong ({len(wrong)}):")
    for g, p in wrong[: args.list]:
        print(f"  keras {g} {short(p.file)}:{p.line} [{p.klass}] `{p.text}` static={p.static} runtime={sorted(p.runtime)}")
    if args.json:
        def rows(kind):
            return [dict(generation=g, file=short(p.file), line=p.line, klass=p.klass, text=p.text, static=p.static,
                         runtime=sorted(p.runtime)) for g, p in pairs if static.verdict(p) == kind]
        payload = {k: v for k, v in result.items()}
        payload["wrong"], payload["unknown"] = rows("wrong"), rows("unknown") + rows("python")
        args.json.write_text(json.dumps(payload, indent=1, sort_keys=True, default=dict))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
