"""README defects of issue 20: the Neovim snippets name the versions they need (and one works on
Neovim 0.7), the test extra does not install two TensorFlow distributions, and ``mpfix instrument``
is documented with its real output."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _lua_blocks() -> list[tuple[str, str]]:
    """(the paragraph before, the code) of each ```lua block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"([^\n]+\n(?:[^\n]+\n)*)\n```lua\n(.*?)```", README, re.S)]


def test_each_neovim_snippet_says_which_versions_it_needs():
    blocks = _lua_blocks()
    assert len(blocks) >= 3
    for before, code in blocks:
        assert re.search(r"Neovim \d+\.\d+", before), before
        if "vim.lsp.config(" in code or "vim.lsp.enable(" in code:
            assert "0.11" in before
        if "vim.lsp.start(" in code:
            assert "0.8" in before
    # One snippet for Neovim 0.7 (Debian 12's), which has neither vim.lsp.start nor vim.lsp.config.
    old = [code for before, code in blocks if "0.7" in before]
    assert old and all("vim.lsp.start(" not in c and "vim.lsp.config(" not in c and "lspconfig" not in c for c in old)
    assert "vim.lsp.start_client(" in old[0] and "vim.lsp.buf_attach_client(" in old[0]


def test_the_test_extra_installs_one_tensorflow_distribution():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower().replace("_", "-") for r in extras}
    # tf-keras requires `tensorflow`: `tensorflow-cpu` beside it was a second copy of the same package.
    assert "tf-keras" in names and "tensorflow" in names and "tensorflow-cpu" not in names


def test_instrument_is_documented_with_its_real_output():
    match = re.search(r"```console\n\$ (mpfix instrument (\S+))\n(.*?)```", README, re.S)
    assert match, "README has no `mpfix instrument` example"
    _, script, shown = match.groups()
    real = subprocess.run([sys.executable, "-m", "mpfix", "instrument", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert real.returncode == 0 and real.stdout == shown
    help_text = subprocess.run([sys.executable, "-m", "mpfix", "instrument", "--help"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60).stdout
    section = README[README.index("mpfix instrument"):match.start()]
    for option in re.findall(r"`(--?[a-z][\w-]*)", section):
        assert option in help_text, option
