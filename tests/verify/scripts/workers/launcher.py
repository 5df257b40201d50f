"""A launcher: starts --workers processes of mwms.py, each with its TF_CONFIG, and waits for
them (it trains nothing itself). Arguments after `--` go to every worker."""
import argparse
import json
import os
import socket
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("rest", nargs=argparse.REMAINDER)
args = parser.parse_args()
extra = args.rest[1:] if args.rest[:1] == ["--"] else args.rest

sockets = [socket.socket() for _ in range(args.workers)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
ports = [s.getsockname()[1] for s in sockets]
for s in sockets:
    s.close()
worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mwms.py")
procs = []
for index in range(args.workers):
    config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
    env = dict(os.environ, TF_CONFIG=json.dumps(config))
    procs.append(subprocess.Popen([sys.executable, worker, "--steps", str(args.steps), *extra], env=env))
sys.exit(max(p.wait() for p in procs))
