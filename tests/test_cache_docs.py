"""The README's cache paragraph says what ``mpfix.cache`` does with its secret."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mpfix import cache

README = Path(__file__).resolve().parent.parent / "README.md"


def _cache_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Speed and the cache")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_names_the_cache_secret_where_the_code_keeps_it(tmp_path: Path, monkeypatch):
    section = " ".join(_cache_section().split())
    assert f"`${cache.ENV_SECRET}`" in section and "`~/.cache/mpfix/cache-secret`" in section
    assert "`$XDG_CACHE_HOME`" in section and "0600" in section
    assert "is recomputed, never trusted" in section
    # What it says: without the variable, a secret is created once in the user's cache folder, mode 0600 ...
    monkeypatch.delenv(cache.ENV_SECRET, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = cache._secret()
    path = tmp_path / "mpfix" / "cache-secret"
    assert path.read_bytes() == first and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert cache._secret() == first
    # ... and another user's (or CI's) secret gives other keys: their cache is not reused here.
    monkeypatch.setenv(cache.ENV_SECRET, "ci-secret")
    assert cache._secret() not in (first, b"")
