"""Child side: follow the workers a launcher script starts (``verify train_launcher.py``).

verify puts a two-line ``sitecustomize.py`` (``from mpfix.verify._follow import main;
main()``) on the ``PYTHONPATH`` of the script it runs, and names a config template in
``MPFIX_VERIFY_FOLLOW``. Every Python process the script starts inherits both. In one that
has a ``TF_CONFIG`` (a worker the launcher started) and runs a ``.py`` file, ``main``
replaces the process (``os.execv``: same pid, so the launcher still waits for it) with the
bootstrap running that same file and arguments as worker i, its number in the cluster's training
group (a chief first, then the workers: ``_peers.cluster_rank``), with its records beside the
launcher's (``<mode>-w<i>.jsonl``). An evaluator or parameter server task is not followed. Everything else is left alone, and a
``sitecustomize`` the environment had is still run.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys

from mpfix.verify._peers import cluster_rank

ENV = "MPFIX_VERIFY_FOLLOW"
# Set before the exec: the bootstrap's own start (it imports this sitecustomize too) and
# the worker's children are not followed again.
DONE = "MPFIX_VERIFY_FOLLOWED"


def main() -> None:
    try:
        _follow()
    except Exception:
        pass  # never break a process the user's script started
    _chain()


def _follow() -> None:
    template, tf_config = os.environ.get(ENV), os.environ.get("TF_CONFIG")
    if not template or not tf_config or os.environ.get(DONE):
        return
    script = sys.argv[0] if sys.argv else ""
    if not script.endswith(".py") or not os.path.isfile(script):
        return
    rank = cluster_rank(tf_config)
    if rank is None:  # an evaluator or a parameter server: not a worker of the training group
        return
    index = rank[0]
    with open(template, encoding="utf-8") as fh:
        config = json.load(fh)
    folder = os.path.dirname(template)
    name = f"{config.pop('name')}-w{index}"
    scratch = os.path.join(folder, f"{name}-scratch")
    os.makedirs(scratch, exist_ok=True)
    script = os.path.abspath(script)
    config.update(
        script=script,
        origin=script,
        args=sys.argv[1:],
        records=os.path.join(folder, f"{name}.jsonl"),
        halt=os.path.join(folder, f"{name}.halt"),
        worker=index,
        # What the worker's watchdog removes if the launcher dies first: its own scratch
        # folder, never verify's temporary folder (mpfix cleans that).
        tempdir=scratch,
    )
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    os.environ[DONE] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "mpfix.verify._bootstrap", "--config", path])


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows, if the environment has one."""
    here = os.path.dirname(os.path.abspath(sys.modules.get("sitecustomize").__file__)) if "sitecustomize" in sys.modules and getattr(sys.modules["sitecustomize"], "__file__", None) else None
    paths = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
