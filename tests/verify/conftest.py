"""Fixtures for mpfix verify's tests: real TensorFlow children on CPU, few steps."""

from __future__ import annotations

from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="session")
def scripts() -> Path:
    return SCRIPTS


def verify_script(name: str, *args: str, **options):
    """Verify a fixture script on CPU with both children at once (2 cores)."""
    from mpfix.verify.run import verify

    options.setdefault("steps", 12)
    options.setdefault("device", "cpu")
    options.setdefault("jobs", 2)
    options.setdefault("timeout", 120)
    return verify(SCRIPTS / name, list(args), **options)
