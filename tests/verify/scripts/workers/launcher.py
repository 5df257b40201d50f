"""A launcher: starts --workers processes of mwms.py, each with its TF_CONFIG, and waits for
them (it trains nothing itself). Arguments after `--` go to every worker."""
import argparse
import json
import os
import random
import socket
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--chief", action="store_true", help="the first process is the cluster's chief task")
parser.add_argument("rest", nargs=argparse.REMAINDER)
args = parser.parse_args()
extra = args.rest[1:] if args.rest[:1] == ["--"] else args.rest

# Free ports outside the kernel's ephemeral range: the workers bind them only after TensorFlow's
# import, and meanwhile an outgoing connection (their own, to each other) may take a port of that range.
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        low, high = (int(part) for part in fh.read().split())
except (OSError, ValueError):
    low, high = 32768, 65535
sockets = []
for port in random.SystemRandom().sample([p for p in range(10_000, 65536) if not low <= p <= high], 64 * args.workers):
    if len(sockets) == args.workers:
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    sockets.append(s)
ports = [s.getsockname()[1] for s in sockets]
for s in sockets:
    s.close()
worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mwms.py")
procs = []
addresses = [f"127.0.0.1:{p}" for p in ports]
cluster = {"chief": addresses[:1], "worker": addresses[1:]} if args.chief else {"worker": addresses}
tasks = [("chief", 0)] * args.chief + [("worker", i) for i in range(args.workers - args.chief)]
for kind, index in tasks:
    config = {"cluster": cluster, "task": {"type": kind, "index": index}}
    env = dict(os.environ, TF_CONFIG=json.dumps(config))
    procs.append(subprocess.Popen([sys.executable, worker, "--steps", str(args.steps), *extra], env=env))
sys.exit(max(p.wait() for p in procs))
