"""verify on a real GPU (``--device gpu``): skipped where TensorFlow sees no GPU (always on
tensorflow-cpu). benchmarks/gpu_check.sh is the fuller check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from verify_helpers import verify_script

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


@pytest.fixture(scope="module", autouse=True)
def _need_gpu():
    if not _gpus():
        pytest.skip("no GPU visible to TensorFlow")


@pytest.mark.parametrize("name, expected", [("healthy_fit.py", "healthy"), ("k3_underflow.py", "underflow"),
                                            ("mask_nan.py", "non-finite")])
def test_gpu_verdict_equals_cpu(name, expected):
    gpu = verify_script(name, device="gpu")
    assert gpu.mixed.device == "gpu"
    assert gpu.verdict.name == expected, gpu.verdict.summary
    cpu = verify_script(name, device="cpu")
    assert cpu.verdict.name == gpu.verdict.name
