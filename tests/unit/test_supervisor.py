"""The launcher's supervisor, on real child processes: a death is reported with the log's tail and
the process restarted; a process that keeps dying is given up on."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from devstack.processes import ManagedProcess
from devstack.supervisor import MAX_RESTARTS, Supervisor


def _tail(log: Path):
    return lambda name, lines: "\n".join(log.read_text().splitlines()[-lines:])


def test_a_dead_child_is_reaped_reported_with_its_log_and_restarted(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    argv = [sys.executable, "-c", "print('polling', flush=True); import time; time.sleep(60)"]
    child = ManagedProcess("worker", argv, log_path=log)
    child.start()
    supervisor = Supervisor({"worker": child}, _tail(log))
    try:
        deadline = time.monotonic() + 10
        while "polling" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert supervisor.check() == []  # alive: nothing to say
        crashed_pid = child.pid
        assert crashed_pid is not None
        os.kill(crashed_pid, signal.SIGKILL)  # a crash: the launcher learns of it only by looking
        lines: list[str] = []
        while not lines and time.monotonic() < deadline:
            lines = supervisor.check()
            time.sleep(0.02)
        assert lines[0] == "worker exited with code -9; last lines of its log:"
        assert lines[1:-1] == ["  polling"]
        assert lines[-1] == f"worker restarted (pid {child.pid})"
        assert child.pid != crashed_pid
        assert child.process is not None and child.process.poll() is None  # running again
    finally:
        child.stop()


def test_a_child_that_keeps_dying_is_given_up_on(tmp_path: Path) -> None:
    log = tmp_path / "receipts.log"
    child = ManagedProcess("receipts", [sys.executable, "-c", "print('bad setting'); raise SystemExit(2)"], log_path=log)
    child.start()
    supervisor = Supervisor({"receipts": child}, _tail(log))
    restarts = 0
    given_up: list[str] = []
    deadline = time.monotonic() + 30
    while not given_up and time.monotonic() < deadline:
        lines = supervisor.check()
        restarts += sum(line.startswith("receipts restarted") for line in lines)
        given_up = [line for line in lines if "not restarting it" in line]
        time.sleep(0.05)
    assert restarts == MAX_RESTARTS
    assert given_up and "fix the cause" in given_up[0]
    assert supervisor.check() == []  # said once, not every second
