"""Spins at 100% CPU forever after importing keras: whatever ends mpfix (SIGTERM,
SIGHUP, SIGKILL), this child must not outlive it."""
import keras  # noqa: F401

while True:
    pass
