"""The launcher's watch over its children: a process that died is reported with its log tail and restarted.

Without it a worker that crashed stayed a zombie while the launcher slept, and every intent on
its task queue stalled with nothing on the screen to say so. A process that keeps dying is given
up on after MAX_RESTARTS within RESTART_WINDOW_SECONDS, loudly, instead of restarting in a loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from devstack.processes import ManagedProcess

MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 60.0
LOG_TAIL_LINES = 15


@dataclass
class Supervisor:
    processes: dict[str, ManagedProcess]
    log_tail: Callable[[str, int], str]
    clock: Callable[[], float] = time.monotonic
    _restarts: dict[str, list[float]] = field(default_factory=dict)
    _given_up: set[str] = field(default_factory=set)

    def check(self) -> list[str]:
        """Reap every child that exited, restart it unless it keeps dying; what happened, as lines to print."""
        lines: list[str] = []
        for name, managed in list(self.processes.items()):
            process = managed.process
            if process is None or name in self._given_up:
                continue
            code = process.poll()  # also reaps it: no zombie
            if code is None:
                continue
            lines.append(f"{name} exited with code {code}; last lines of its log:")
            lines += [f"  {line}" for line in self.log_tail(name, LOG_TAIL_LINES).splitlines()]
            now = self.clock()
            recent = [t for t in self._restarts.get(name, []) if now - t < RESTART_WINDOW_SECONDS]
            if len(recent) >= MAX_RESTARTS:
                self._given_up.add(name)
                lines.append(
                    f"{name} died {len(recent) + 1} times within {RESTART_WINDOW_SECONDS:.0f} s: not restarting it; "
                    "fix the cause and run the launcher again"
                )
                continue
            self._restarts[name] = [*recent, now]
            managed.start()
            lines.append(f"{name} restarted (pid {managed.pid})")
        return lines
