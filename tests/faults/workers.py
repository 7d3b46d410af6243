"""Service subprocesses for the fault stack (workers, outbox relays): started, waited for until
their log says they are ready, stopped, or awaited as they crash at a fault point."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from devstack.processes import ManagedProcess
from devstack.stack import LocalStack


@contextmanager
def service(stack: LocalStack, name: str, argv: list[str], ready: str, env: dict[str, str]) -> Iterator[ManagedProcess]:
    """A service subprocess with the stack's settings plus `env`, yielded once its log shows `ready`."""
    log = stack.log_dir / f"{name}.log"
    start = log.stat().st_size if log.exists() else 0  # logs append: read only this run's lines
    process = stack._spawn(name, argv, service=True, extra_env=env)
    deadline = time.monotonic() + 30
    try:
        while ready not in (log.read_bytes()[start:].decode(errors="replace") if log.exists() else ""):
            assert process.process.poll() is None, f"{name} exited: {stack.log_tail(name)}"
            assert time.monotonic() < deadline, f"{name} did not get ready: {stack.log_tail(name)}"
            time.sleep(0.05)
        yield process
    finally:
        process.stop()


@contextmanager
def worker(stack: LocalStack, name: str, **env: str) -> Iterator[ManagedProcess]:
    """A worker subprocess, yielded once it polls its task queue; with HERALD_FAULT_POINT in `env`,
    worker.py's worker with its providers wrapped in the crash points (devstack/fault_points.py)."""
    argv = (
        [sys.executable, "-m", "devstack.fault_points", "worker"]
        if "HERALD_FAULT_POINT" in env
        else [sys.executable, "worker.py"]
    )
    with service(stack, name, argv, "worker polling task queue", env) as process:
        yield process


async def crashed(process: ManagedProcess, timeout: float = 30) -> int:
    """The exit code of a service that is to crash at its fault point, waited for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while process.process.poll() is None:
        assert time.monotonic() < deadline, f"{process.name} did not crash at its fault point"
        await asyncio.sleep(0.1)
    return process.process.returncode
