"""Worker subprocesses for the fault stack: started, waited for until they poll, stopped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from devstack.processes import ManagedProcess
from devstack.stack import LocalStack


@contextmanager
def worker(stack: LocalStack, name: str, **env: str) -> Iterator[ManagedProcess]:
    """A worker subprocess, yielded once it polls its task queue (its log says so)."""
    log = stack.log_dir / f"{name}.log"
    start = log.stat().st_size if log.exists() else 0  # logs append: read only this run's lines
    process = stack.start_worker(name, extra_env=env)
    deadline = time.monotonic() + 30
    try:
        while "worker polling task queue" not in (log.read_bytes()[start:].decode(errors="replace") if log.exists() else ""):
            assert process.process.poll() is None, f"{name} exited: {stack.log_tail(name)}"
            assert time.monotonic() < deadline, f"{name} did not start polling: {stack.log_tail(name)}"
            time.sleep(0.05)
        yield process
    finally:
        process.stop()
