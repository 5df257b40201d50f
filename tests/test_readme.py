"""The README stays true: its rule table, its quickstart commands and its pasted output.

``python tests/test_readme.py --write`` regenerates the rule table, docs/rules.md and the output of every
``mpfix check``/``diff``/``apply`` command in the README's console blocks (``mpfix verify``
output runs TensorFlow: paste it by hand; tests/test_samples.py checks its verdicts).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RULES_START, RULES_END = "<!-- rules:start -->", "<!-- rules:end -->"
_CONSOLE = re.compile(r"^```console\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


@dataclass
class Command:
    line: str  # without the "$ " prompt
    output: str  # the lines the README shows after it
    span: tuple[int, int]  # where ``output`` sits in the README text


def commands(text: str) -> list[Command]:
    """Every ``$ command`` of every console block, with the output shown under it."""
    found = []
    for block in _CONSOLE.finditer(text):
        body, start = block.group(1), block.start(1)
        lines = body.splitlines(keepends=True)
        offset = start
        current = None
        for line in lines:
            if line.startswith("$ "):
                if current is not None:
                    current.span = (current.span[0], offset)
                    found.append(current)
                current = Command(line[2:].rstrip("\n"), "", (offset + len(line), offset + len(line)))
            elif current is not None:
                current.output += line
            offset += len(line)
        if current is not None:
            current.span = (current.span[0], offset)
            found.append(current)
    return found


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end != -1 else len(text)]


def rules_table() -> str:
    from mpfix.codemods import all_rules
    from mpfix.rule_docs import rules_table_markdown

    return rules_table_markdown(all_rules())


RULES_DOC = ROOT / "docs" / "rules.md"


def rules_doc() -> str:
    """docs/rules.md: every rule's documentation, anchored where ``rule_url`` (JSON ``url``) points."""
    from mpfix.codemods import all_rules
    from mpfix.rule_docs import FILE_ERROR_CODE, FILE_ERROR_DOC, FILE_ERROR_NAME, fix_summary

    parts = ["# mpfix rules\n\nGenerated from the rule classes by `python tests/test_readme.py --write`; "
             "`mpfix explain CODE` prints the same text.\n"]
    for rule in all_rules():
        gens = ", ".join(str(g) for g in rule.keras_generations)
        scope = "; only where a mixed_float16 policy is in play" if rule.requires_float16 else ""
        body = re.sub(r"^(#+) ", r"#\1 ", rule.doc().strip(), flags=re.MULTILINE)
        parts.append(f'<a id="{rule.code.lower()}"></a>\n## {rule.code} {rule.name}\n\n'
                     f"Fix: {fix_summary(rule)}. Keras: {gens}{scope}.\n\n{body}\n")
    body = re.sub(r"^(#+) ", r"#\1 ", FILE_ERROR_DOC.strip(), flags=re.MULTILINE)
    parts.append(f'<a id="{FILE_ERROR_CODE.lower()}"></a>\n## {FILE_ERROR_CODE} {FILE_ERROR_NAME}\n\n'
                 f"Not a rule: reported for a file that was not checked (exit code 2).\n\n{body}\n")
    return "\n".join(parts)


def _env() -> dict:
    env = dict(os.environ)
    env.pop("FORCE_COLOR", None)
    return env


def replay(cmds: list[Command], workdir: Path) -> dict[int, str]:
    """Run the README's mpfix check/diff/apply commands in order in ``workdir``: index → output."""
    shutil.copytree(ROOT / "samples", workdir / "samples")
    outputs = {}
    for index, cmd in enumerate(cmds):
        argv = shlex.split(cmd.line)
        if argv[:2] == ["cp", "-r"]:
            shutil.copytree(workdir / argv[2], workdir / argv[3])
        elif argv[0] == "mpfix" and argv[1] in ("check", "diff", "apply", "rules"):
            result = subprocess.run([sys.executable, "-m", "mpfix", *argv[1:]], cwd=workdir, env=_env(),
                                    capture_output=True, text=True, timeout=300)
            outputs[index] = result.stdout + result.stderr
    return outputs


def test_rule_table_is_current():
    text = README.read_text(encoding="utf-8")
    table = text.split(RULES_START, 1)[1].split(RULES_END, 1)[0].strip()
    assert table == rules_table(), "README rule table is stale: run `python tests/test_readme.py --write`"


def test_rules_doc_is_current():
    from mpfix.rule_docs import rule_url

    assert RULES_DOC.read_text(encoding="utf-8") == rules_doc(), "run `python tests/test_readme.py --write`"
    assert rule_url("MP201").endswith("docs/rules.md#mp201") and '<a id="mp201"></a>' in rules_doc()
    # An unreadable file's JSON/SARIF link (docs/rules.md#mp000) lands on a section too.
    assert rule_url("MP000").endswith("docs/rules.md#mp000") and '<a id="mp000"></a>' in rules_doc()


def test_quickstart_is_two_commands_and_ci_runs_the_second():
    quickstart = commands(section(README.read_text(encoding="utf-8"), "Quickstart"))
    assert [c.line for c in quickstart] == [
        'python -m pip install -e . && mpfix check samples/',
        'python -m pip install -e ".[test]" && python -m pytest',
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    quiet = re.compile(r"\s--(quiet|disable-pip-version-check)\b")
    for part in quickstart[1].line.split(" && "):
        assert part in [quiet.sub("", line) for line in ci_lines], f"{part!r} is not in .ci/run"


def test_walkthrough_output_is_what_mpfix_prints(tmp_path):
    cmds = commands(section(README.read_text(encoding="utf-8"), "Walkthrough"))
    outputs = replay(cmds, tmp_path)
    compared = [cmds[i].line for i in outputs]
    assert "mpfix check samples/" in compared and "mpfix apply --unsafe-fixes fixed-samples/" in compared
    for index, output in outputs.items():
        assert cmds[index].output == output, f"README output of `{cmds[index].line}` is stale (--write regenerates it)"


def test_every_mpfix_command_in_the_readme_exists():
    from mpfix.cli import LAZY_COMMANDS

    for cmd in commands(README.read_text(encoding="utf-8")):
        for part in cmd.line.split(" && "):
            argv = shlex.split(part)
            if argv[0] == "mpfix":
                assert argv[1] in LAZY_COMMANDS, cmd.line


def write() -> None:
    text = README.read_text(encoding="utf-8")
    before, rest = text.split(RULES_START, 1)
    _, after = rest.split(RULES_END, 1)
    text = f"{before}{RULES_START}\n{rules_table()}\n{RULES_END}{after}"
    walkthrough = section(text, "Walkthrough")
    base = text.index(walkthrough)
    cmds = commands(walkthrough)
    with tempfile.TemporaryDirectory() as tmp:
        outputs = replay(cmds, Path(tmp))
    for index in sorted(outputs, reverse=True):
        start, end = cmds[index].span
        text = text[: base + start] + outputs[index] + text[base + end:]
    README.write_text(text, encoding="utf-8")
    RULES_DOC.write_text(rules_doc(), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        sys.path.insert(0, str(ROOT))
        write()
    else:
        sys.exit("usage: python tests/test_readme.py --write")
