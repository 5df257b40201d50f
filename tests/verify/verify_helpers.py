"""Shared helpers for mpfix verify's tests (a uniquely named module: ``conftest`` is
ambiguous next to tests/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"


def verify_script(name: str, *args: str, **options):
    """Verify a fixture script on CPU with both children at once (2 cores)."""
    from mpfix.verify.run import verify

    options.setdefault("steps", 12)
    options.setdefault("device", "cpu")
    options.setdefault("jobs", 2)
    # A bound, not a budget: generous for a loaded 2-core CI (two TensorFlow children at once).
    options.setdefault("timeout", 300)
    return verify(SCRIPTS / name, list(args), **options)


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit, non-interlaced RGB/RGBA PNG
    (what chromium's --screenshot writes), with the standard library only."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = previous[i], previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, bpp, rows


def tf_env(legacy: bool = False) -> dict[str, str]:
    """The environment of an ``mpfix`` child that runs TensorFlow on CPU: this checkout's mpfix, quiet logs, the Keras
    generation asked for (tf_keras with ``legacy``) whatever the outer environment chose."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.pop("TF_CONFIG", None)  # a worker's cluster is the command's to set (repair/verify --workers)
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


@dataclass(frozen=True)
class RepairRun:
    """One real ``mpfix repair`` of a copied script: the process, its ``--json`` report, the script before and after."""

    result: subprocess.CompletedProcess
    report: dict
    before: str
    after: str


def repair_copy(tmp_path: Path, source: Path, *args: str, steps: int = 10, legacy: bool = False,
                text: str | None = None, timeout: int = 1500) -> RepairRun:
    """Copy ``source`` (or write ``text`` under its name) to ``tmp_path`` and run ``mpfix repair`` on it there."""
    script = tmp_path / source.name
    if text is None:
        shutil.copy(source, script)
    else:
        script.write_text(text)
    before = script.read_text()
    report = tmp_path / "repair.json"
    result = subprocess.run([sys.executable, "-m", "mpfix", "repair", script.name, *args, "--steps", str(steps),
                             "--device", "cpu", "--json", str(report)], cwd=tmp_path, env=tf_env(legacy),
                            capture_output=True, text=True, timeout=timeout)
    return RepairRun(result, json.loads(report.read_text()), before, script.read_text())
