"""The MP2 lint helpers the turn-by-turn numerics tests share: every MP2 rule under a forced mixed_float16 policy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP2 = tuple(r for r in all_rules() if r.code.startswith("MP2"))
BOTH = pytest.mark.parametrize("keras", [2, 3])
IMPORTS = {3: "import keras", 2: "import tf_keras as keras"}


def lint(code: str, keras: int = 3, *, fix: bool = True, policy: str | None = "mixed_float16"):
    engine = Engine(MP2, Options(keras=str(keras), policy=policy, unsafe_fixes=True, project_policy=False))
    return engine.lint(textwrap.dedent(code).lstrip("\n"), Path("train.py"), fix=fix)


def found(code: str, keras: int = 3, only: str = "MP2", **kw) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint(code, keras, fix=False, **kw).findings if f.code.startswith(only))
