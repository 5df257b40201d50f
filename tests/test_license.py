"""Packaging (issue 20): a LICENSE file with the Apache-2.0 text the project declares, declared the
PEP 639 way (an SPDX ``license`` string and ``license-files``; the TOML-table form is deprecated by
setuptools), with a build backend that understands it, and the built wheel carrying both."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_file_is_the_full_apache_2_text():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    # All nine sections of the terms, through the end of them: the full text, not a notice.
    for number, title in enumerate(["Definitions", "Grant of Copyright License", "Grant of Patent License",
                                    "Redistribution", "Submission of Contributions", "Trademarks",
                                    "Disclaimer of Warranty", "Limitation of Liability",
                                    "Accepting Warranty or Additional Liability"], start=1):
        assert re.search(rf"^\s*{number}\. {title}\.", text, re.M), title
    assert "END OF TERMS AND CONDITIONS" in text


def test_license_is_an_spdx_string_with_its_file_and_a_backend_that_reads_it():
    data = _pyproject()
    assert data["project"]["license"] == "Apache-2.0"
    assert data["project"]["license-files"] == ["LICENSE"]
    (requirement,) = [r for r in data["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = tuple(int(p) for p in re.search(r">=\s*([\d.]+)", requirement).group(1).split("."))
    assert minimum >= (77,), "setuptools reads PEP 639 license metadata from 77.0"


@pytest.mark.slow
def test_the_wheel_carries_the_license(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("mpfix-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
