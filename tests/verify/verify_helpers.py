"""Shared helpers for mpfix verify's tests (a uniquely named module: ``conftest`` is
ambiguous next to tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

SCRIPTS = Path(__file__).parent / "scripts"


def verify_script(name: str, *args: str, **options):
    """Verify a fixture script on CPU with both children at once (2 cores)."""
    from mpfix.verify.run import verify

    options.setdefault("steps", 12)
    options.setdefault("device", "cpu")
    options.setdefault("jobs", 2)
    options.setdefault("timeout", 120)
    return verify(SCRIPTS / name, list(args), **options)
