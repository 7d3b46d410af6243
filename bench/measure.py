"""CPU and memory of the stack's processes, read from /proc (Linux only).

CPU of a process group is the sum over the root process and all its live descendants of
their own utime+stime, plus cutime+cstime (CPU of children they already reaped). A
backend that PostgreSQL forks and reaps during a phase is therefore counted once: live in
one snapshot, inside its parent's cutime in the next. Deltas between two snapshots give the
CPU a group spent during a phase. The resolution is one clock tick (usually 10 ms) per
process, which is why per-intent figures need phases of a few hundred intents.

The driver (this process) is measured alone (utime+stime, never cutime): every stack
process is our child, and counting reaped children here would double-count them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class _Stat:
    ppid: int
    own: int  # utime + stime, ticks
    reaped: int  # cutime + cstime, ticks


def _read_stat(pid: int) -> _Stat | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses: fields start after the last ')'.
    rest = data[data.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); ppid is field 4, utime..cstime are fields 14..17.
    return _Stat(ppid=int(rest[1]), own=int(rest[11]) + int(rest[12]), reaped=int(rest[13]) + int(rest[14]))


def _all_stats() -> dict[int, _Stat]:
    stats: dict[int, _Stat] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    return stats


def _subtree(root: int, stats: dict[int, _Stat]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            found.append(pid)
            todo.extend(children.get(pid, []))
    return found


class CpuMeter:
    """Snapshots of CPU seconds per named process group; ``groups`` maps a name to a root pid."""

    def __init__(self, groups: dict[str, int], *, driver_name: str = "driver") -> None:
        self.groups = dict(groups)
        self.driver_name = driver_name

    def snapshot(self) -> dict[str, float]:
        """CPU seconds so far per group, plus MACHINE (all CPUs, every process) and OURS (all groups)."""
        stats = _all_stats()
        machine = _machine_busy_seconds()
        seconds: dict[str, float] = {}
        for name, root in self.groups.items():
            ticks = sum(stats[pid].own + stats[pid].reaped for pid in _subtree(root, stats))
            seconds[name] = ticks / CLOCK_TICKS
        own = _read_stat(os.getpid())
        seconds[self.driver_name] = (own.own if own else 0) / CLOCK_TICKS
        seconds[OURS] = sum(seconds.values())
        seconds[MACHINE] = machine
        return seconds

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: after[name] - before.get(name, 0.0) for name in after}

    @staticmethod
    def foreign(delta: dict[str, float]) -> float:
        """CPU seconds the machine spent outside the bench's processes (another job, the kernel) in a window.

        It says how clean a measurement was: the bench cannot stop other work, but it can report it.
        """
        return max(0.0, delta.get(MACHINE, 0.0) - delta.get(OURS, 0.0))


MACHINE = "_machine"
OURS = "_ours"


def _machine_busy_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot: /proc/stat's first line, all but idle and iowait."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    # guest time is already inside user/nice.
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def rss_mib(pid: int) -> tuple[float, float] | None:
    """(current resident set, peak resident set) of one process in MiB, from /proc/<pid>/status."""
    values: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024  # reported in kB
    except (FileNotFoundError, ProcessLookupError):
        return None
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def postmaster_pid(pgdata: Path) -> int | None:
    """The PostgreSQL postmaster's pid: the first line of postmaster.pid in its data directory."""
    for candidate in [pgdata, *pgdata.glob("*")]:
        pid_file = candidate / "postmaster.pid" if candidate.is_dir() else None
        if pid_file and pid_file.exists():
            return int(pid_file.read_text().splitlines()[0])
    return None
