#!/usr/bin/env bash
# One short check of `mpfix verify` on a GPU (under 5 minutes on one GPU):
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
#
# Runs `mpfix verify --device gpu` on every sample and on a few test scripts (with a float32
# baseline), and the same runs with `--device cpu` in parallel, then prints per script: the
# GPU and CPU verdicts and whether they agree, float16 (mixed) vs float32 seconds per step on
# the GPU, and the mixed run's loss-scale trace. Exits 0 when every verdict agrees, 1 when one
# differs, 2 when no GPU is visible to TensorFlow (nothing is run then). The JSON reports stay
# in OUT_DIR (default: a temporary folder).
#
# Needs a TensorFlow build with CUDA in the interpreter (`pip install 'tensorflow[and-cuda]'`;
# tensorflow-cpu, which the test extra installs, sees no GPU) and tf-keras for the Keras 2
# sample.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-$(mktemp -d -t mpfix-gpu-check-XXXXXX)}
mkdir -p "$OUT"

# GPU_CHECK_DRY=1: the "gpu" runs use --device cpu (to try this script where there is no
# GPU; its verdicts then say nothing about a GPU). GPU_CHECK_ONLY="name ...": only those.
GPU_DEVICE=gpu
if [ "${GPU_CHECK_DRY:-0}" = "1" ]; then
    GPU_DEVICE=cpu
    echo "gpu_check: DRY RUN: the gpu column runs on the CPU" >&2
fi
gpus=$("$PY" - <<'PY' 2>/dev/null
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
try:
    import tensorflow as tf
except ImportError:
    print("no-tensorflow")
else:
    print(len(tf.config.list_physical_devices("GPU")))
PY
)
if [ "$gpus" = "no-tensorflow" ]; then
    echo "gpu_check: TensorFlow is not installed for $PY" >&2
    exit 2
fi
if [ "$GPU_DEVICE" = gpu ] && { [ -z "$gpus" ] || [ "$gpus" = "0" ]; }; then
    echo "gpu_check: no GPU is visible to TensorFlow ($PY; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})." >&2
    echo "gpu_check: install a CUDA build (pip install 'tensorflow[and-cuda]') on a machine with a GPU; nothing was run." >&2
    exit 2
fi
echo "gpu_check: $gpus GPU(s) visible; reports in $OUT"

# script|steps|extra verify options|script arguments
CASES=(
  "samples/k3_no_loss_scaling.py|20||"
  "samples/k2_half_done_scaling.py|10||"
  "samples/tf24_era_training.py|10||"
  "samples/attention_mask_1e9.py|10||"
  "samples/epsilon_normalisation.py|10||"
  "samples/l2_loss_activations.py|10||"
  "samples/float16_regression_head.py|50||"
  "samples/healthy_training.py|20||"
  "tests/verify/scripts/healthy_fit.py|50||"
  "tests/verify/scripts/k3_underflow.py|12||"
  "tests/verify/scripts/gan.py|12|--no-baseline|--critic 2"
  "tests/verify/scripts/sgd_clip_warmup.py|50||"
)

if [ -n "${GPU_CHECK_ONLY:-}" ]; then
    kept=()
    for spec in "${CASES[@]}"; do
        for only in $GPU_CHECK_ONLY; do
            [ "$(basename "${spec%%|*}" .py)" = "$only" ] && kept+=("$spec")
        done
    done
    CASES=("${kept[@]}")
fi

run_one() {  # label case (label gpu runs on $GPU_DEVICE)
    local label=$1 spec=$2 script steps opts sargs name device=$1
    [ "$label" = gpu ] && device=$GPU_DEVICE
    IFS='|' read -r script steps opts sargs <<<"$spec"
    name=$(basename "$script" .py)
    # shellcheck disable=SC2086
    timeout 240 "$PY" -m mpfix verify "$script" --device "$device" --steps "$steps" --jobs 2 --timeout 200 \
        $opts --json "$OUT/$label-$name.json" ${sargs:+-- $sargs} >"$OUT/$label-$name.txt" 2>&1
    echo $? >"$OUT/$label-$name.rc"
}
export -f run_one
export PY OUT GPU_DEVICE

start=$(date +%s)
# CPU runs (2 at a time) beside the GPU runs (one at a time: each already runs mixed and
# float32 at once, sharing the GPU with TF_FORCE_GPU_ALLOW_GROWTH).
(for spec in "${CASES[@]}"; do printf '%s\n' "$spec"; done | CUDA_VISIBLE_DEVICES=-1 xargs -P 2 -I{} bash -c 'run_one cpu "$1"' _ {}) &
cpu_pid=$!
for spec in "${CASES[@]}"; do run_one gpu "$spec"; done
wait "$cpu_pid"
echo "gpu_check: all runs done in $(( $(date +%s) - start )) s"

"$PY" - "$OUT" "${CASES[@]}" <<'PY'
import json, sys
from pathlib import Path

from mpfix.verify.records import parse_run
from mpfix.verify.report_text import scale_trajectory

out, cases = Path(sys.argv[1]), sys.argv[2:]


def load(device, name):
    path = out / f"{device}-{name}.json"
    rc = (out / f"{device}-{name}.rc").read_text().strip() if (out / f"{device}-{name}.rc").exists() else "?"
    if not path.exists():
        return None, rc
    return json.loads(path.read_text()), rc


def run_of(data, mode):
    raw = (data or {}).get("runs", {}).get(mode)
    if not raw:
        return None
    events = [dict(s, event="step") for s in raw["steps"]]
    return parse_run(mode, events)


def ms(run):
    t = run.step_time if run is not None else None
    return f"{t * 1e3:7.2f}" if t else "    n/a"


differ = 0
print(f"{'script':28s} {'gpu verdict':12s} {'cpu verdict':12s} same  f16 ms/step  f32 ms/step  device  loss scale (gpu, mixed)")
for spec in cases:
    name = Path(spec.split("|")[0]).stem
    gpu, grc = load("gpu", name)
    cpu, crc = load("cpu", name)
    gv = gpu["verdict"]["name"] if gpu else f"exit {grc}"
    cv = cpu["verdict"]["name"] if cpu else f"exit {crc}"
    same = gv == cv
    differ += not same
    mixed, base = run_of(gpu, "mixed"), run_of(gpu, "float32")
    device = (gpu or {}).get("runs", {}).get("mixed", {}).get("device") or "?"
    trace = scale_trajectory(mixed) if mixed is not None else "n/a"
    print(f"{name:28s} {gv:12s} {cv:12s} {'yes' if same else 'NO ':4s} {ms(mixed):>11s}  {ms(base):>11s}  {device:6s}  {trace}")
print(f"gpu_check: {len(cases) - differ} of {len(cases)} verdicts equal on GPU and CPU")
sys.exit(1 if differ else 0)
PY
