"""Parent side: what one child run produced, read back from its JSON-lines file.

Never imports TensorFlow. Non-finite numbers travel as the strings "nan", "inf", "-inf"
(JSON has no NaN) and are decoded to floats here.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path


def _number(value):
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)
    return float(value)


def json_number(value):
    """Inverse of ``_number`` for writing reports."""
    if value is None or (isinstance(value, float) and math.isfinite(value)) or isinstance(value, int):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


@dataclass
class Step:
    step: int
    loss: float | None
    loss_scale: float | None
    dynamic: bool
    skipped: bool
    nonfinite_fraction: float
    zero_fraction: float
    grad_norm: float | None
    optimizer: int = 0
    # Headroom: the largest |value| of this step's float16 layer outputs (None when no
    # float16 layer was measured) and the index of the layer it came from.
    act_max: float | None = None
    act_layer: int | None = None
    # When the child read the row (seconds; rows are read in batches).
    t: float | None = None
    # The worker of `verify --workers` this row is from (None: one process, or the group's
    # merged row), and where a non-finite loss or gradient was: [worker, replica] pairs
    # (replica: of MirroredStrategy's replicas in that process).
    worker: int | None = None
    nonfinite_where: list = field(default_factory=list)

    @property
    def loss_finite(self) -> bool:
        return self.loss is None or math.isfinite(self.loss)

    def to_json(self) -> dict:
        data = asdict(self)
        for key in ("loss", "loss_scale", "grad_norm", "act_max"):
            data[key] = json_number(data[key])
        return data


@dataclass
class RunResult:
    """One child process: the mixed run or the float32 baseline."""

    mode: str
    steps: list[Step] = field(default_factory=list)
    start: dict | None = None
    end: dict | None = None
    crash: dict | None = None
    numerics: dict | None = None
    errors: list[dict] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    elapsed: float = 0.0
    stderr_tail: str = ""
    # Layers measured for headroom, by index: name, class, file, line, code, output_of.
    layers: dict = field(default_factory=dict)
    # Processes the script started with a TF_CONFIG (a launcher of workers): argv, tf_config.
    launches: list = field(default_factory=list)
    # `verify --workers N`: this run is the group's, judged as one (its steps merge the
    # workers'); each worker's own run, by index.
    workers: list = field(default_factory=list)
    # `verify --workers N`: why the parent stopped the group ("hang", "peer crashed"), if it did.
    halted: str | None = None
    # Per-op float16 evidence of traced steps (child: _evidence.py): "op" events (type,
    # name, file, line, function, code, layer, peak, peak_step, first_bad, born, trace,
    # order) and "f16-const" events (a constant that became inf or 0 in float16).
    ops: list = field(default_factory=list)
    constants: list = field(default_factory=list)
    # Casts to float16 in the script's tf.data map functions (child: _data_casts.py): file,
    # line, function, nth (the cast's order among that line's), source dtype, code.
    data_casts: list = field(default_factory=list)
    # A worker that ended normally: when it left the cluster, after its peers ended (_peers.py).
    left: dict | None = None
    # Keras metrics of fit's training batches (child: _metric_hooks.py): step, epoch, batch, values (name -> number,
    # non-finite decoded); and where the project wrote each metric, by name: class, source, file, line, code, method.
    metrics: list = field(default_factory=list)
    metric_origins: dict = field(default_factory=dict)

    @property
    def finite_losses(self) -> list[float]:
        """Finite losses of the first optimizer (the only one, except in GAN-style scripts)."""
        return self.losses_of(self.optimizers[0]) if self.steps else []

    @property
    def optimizers(self) -> list[int]:
        """Optimizer indices seen, in the order of their first update."""
        return list(dict.fromkeys(s.optimizer for s in self.steps))

    @property
    def step_count(self) -> int:
        """Training steps: with several optimizers one step holds one update of each
        (``steps`` has one record per update)."""
        return len({s.step for s in self.steps})

    def of(self, optimizer: int) -> list[Step]:
        return [s for s in self.steps if s.optimizer == optimizer]

    def losses_of(self, optimizer: int) -> list[float]:
        return [s.loss for s in self.of(optimizer) if s.loss is not None and math.isfinite(s.loss)]

    @property
    def keras(self) -> list[int]:
        return list((self.end or {}).get("keras", []))

    @property
    def exit_status(self) -> int | None:
        """The script's own exit status (sys.exit / os._exit), else the process's."""
        end = self.end or {}
        if end.get("status") == "exit":
            return end.get("code")
        return self.returncode

    @property
    def step_time(self) -> float | None:
        """Seconds per step, from the times the child read its rows (first read to last);
        None with fewer than two reads far enough apart."""
        timed = [s for s in self.steps if s.t is not None]
        if len(timed) < 2:
            return None
        # The first read follows the first step, whose time includes tracing; with three
        # reads or more, start at the last step of the first read.
        reads = sorted({s.t for s in timed})
        start = reads[1] if len(reads) >= 3 else reads[0]
        first = [s for s in timed if s.t < start][-1] if len(reads) >= 3 else timed[0]
        last = timed[-1]
        if last.t - first.t <= 0 or last.step <= first.step:
            return None
        return (last.t - first.t) / (last.step - first.step)

    @property
    def skipped_steps(self) -> list[int]:
        """Steps with an update the loss scaler skipped."""
        return sorted({s.step for s in self.steps if s.skipped})

    @property
    def device(self) -> str | None:
        return (self.start or {}).get("device")

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "device": self.device,
            "keras": self.keras,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "elapsed_s": round(self.elapsed, 3),
            "step_time_s": self.step_time,
            "end": self.end,
            "crash": self.crash,
            "numerics": self.numerics,
            "hook_errors": self.errors,
            "layers": {str(k): v for k, v in sorted(self.layers.items())},
            "ops": self.ops,
            "constants": self.constants,
            "steps": [s.to_json() for s in self.steps],
            "metrics": [dict(m, values={k: json_number(v) for k, v in m["values"].items()}) for m in self.metrics],
            "metric_origins": self.metric_origins,
            # verify --workers: each worker's own run, and why the group was halted.
            **({"workers": [w.to_json() for w in self.workers], "halted": self.halted} if self.workers else {}),
        }


def read_events(path: Path) -> list[dict]:
    events = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return events
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            # A line cut short by a killed child: everything before it is still valid.
            break
    return events


def parse_run(mode: str, events: list[dict]) -> RunResult:
    run = RunResult(mode=mode)
    for event in events:
        kind = event.get("event")
        if kind == "step":
            run.steps.append(
                Step(
                    step=int(event["step"]),
                    loss=_number(event.get("loss")),
                    loss_scale=_number(event.get("loss_scale")),
                    dynamic=bool(event.get("dynamic")),
                    skipped=bool(event.get("skipped")),
                    nonfinite_fraction=float(event.get("nonfinite_fraction", 0.0)),
                    zero_fraction=float(event.get("zero_fraction", 0.0)),
                    grad_norm=_number(event.get("grad_norm")),
                    optimizer=int(event.get("optimizer", 0)),
                    act_max=_number(event.get("act_max")),
                    act_layer=None if event.get("act_layer") is None else int(event["act_layer"]),
                    t=event.get("t"),
                    nonfinite_where=[[None, r] for r in event.get("replicas_nonfinite", [])],
                )
            )
        elif kind == "layer":
            run.layers[int(event["index"])] = {k: v for k, v in event.items() if k not in ("event", "index")}
        elif kind == "start":
            run.start = event
        elif kind == "end":
            run.end = event
        elif kind == "crash":
            run.crash = event
        elif kind == "op":
            run.ops.append({k: v for k, v in event.items() if k != "event"})
        elif kind == "f16-const":
            run.constants.append({k: v for k, v in event.items() if k != "event"})
        elif kind == "data-cast":
            run.data_casts.append({k: v for k, v in event.items() if k != "event"})
        elif kind == "metrics":
            values = {str(k): _number(v) for k, v in (event.get("values") or {}).items()}
            run.metrics.append({"step": int(event["step"]), "epoch": event.get("epoch"), "batch": event.get("batch"),
                                "values": values})
        elif kind == "metric-origin":
            run.metric_origins[str(event.get("name"))] = {k: v for k, v in event.items() if k not in ("event", "name")}
        elif kind == "numerics":
            run.numerics = event
        elif kind == "launch":
            run.launches.append(event)
        elif kind == "left":
            run.left = event
        elif kind in ("hook-error", "error"):
            run.errors.append(event)
    return run
