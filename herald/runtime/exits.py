"""How a Herald process ends on a failure it can name: one line, never a traceback, never a value.

``failure`` is the one reading of an exception as (exit code, line) that the command line, the
jobs and the servers share::

    InvalidSetting, HeraldError ...... 2  the variable (or option) and the rule, as raised
    ServiceUnreachable ............... 1  the variable that points at it and the reason
    RPCError, TemporalError .......... 1  Temporal's status, or the error's class
    psycopg.OperationalError ......... 1  lost the database connection (the class)
    psycopg.Error .................... 1  the class and SQLSTATE (its text may quote row values)
    httpx.TransportError, OSError .... 1  a service could not be reached (the class, the reason)
    KeyboardInterrupt ................ 130
    anything else .................... 1  an internal error, named by its class and place only

A server exits with the line alone (``serve``); a job or a command prints ``error: <line>`` and
returns the code (``run_job``).
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import psycopg
from temporalio.exceptions import TemporalError
from temporalio.service import RPCError

from herald.errors import HeraldError
from herald.logs import configure_logging
from herald.runtime.reach import ServiceUnreachable
from herald.settings import InvalidSetting

# What a server or job stops on with one line; anything else is a bug and keeps its traceback.
NAMED = (InvalidSetting, HeraldError, ServiceUnreachable, psycopg.Error)


def failure(error: BaseException, database: str | None = None) -> tuple[int, str]:
    """The exit code and the one line for `error` (`database`: the variable of the database a
    failed statement ran in, when the process has one)."""
    where = f"{database}: " if database else ""
    if isinstance(error, InvalidSetting | HeraldError):
        return 2, str(error)  # a caller's mistake: the field (or variable) and the rule, never the value
    if isinstance(error, ServiceUnreachable):
        return 1, str(error)
    if isinstance(error, RPCError):
        return (
            1,
            f"Temporal refused the request ({error.status.name if error.status else 'unknown status'}): {error.message}",
        )
    if isinstance(error, TemporalError):  # e.g. --wait on an intent whose workflow failed
        return 1, f"Temporal reported {type(error).__name__}"
    if isinstance(error, psycopg.OperationalError):
        return 1, f"{where}lost the database connection ({type(error).__name__})"
    if isinstance(error, psycopg.Error):  # its text may quote row values: the class and SQLSTATE only
        sqlstate = f", SQLSTATE {error.sqlstate}" if error.sqlstate else ""
        return 1, f"{where}the database command failed ({type(error).__name__}{sqlstate})"
    if isinstance(error, httpx.TransportError):
        return 1, f"a service could not be reached ({type(error).__name__})"
    if isinstance(error, OSError):
        return 1, f"a service could not be reached ({type(error).__name__}: {error.strerror or 'no reason given'})"
    if isinstance(error, KeyboardInterrupt):
        return 130, "interrupted"
    # A bug: say where it happened, not what it held, which may be personal data.
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return 1, f"internal error ({type(error).__name__} at {Path(frame.filename).name}:{frame.lineno}); please report it"


def serve(main: Callable[[], Coroutine[Any, Any, None]], *, database: str | None = "DATABASE_URL") -> None:
    """Run a server's `main` until it returns, logging as every Herald process logs; a setting, a
    dependency or a database failure it can name ends the process with that one line (exit status 1)."""
    configure_logging()
    try:
        asyncio.run(main())
    except NAMED as error:
        raise SystemExit(failure(error, database)[1]) from None


def run_job(work: Callable[[], Coroutine[Any, Any, str]], *, database: str | None = "DATABASE_URL") -> int:
    """Run a job and print what it did; a failure it can name is `error: <line>` on stderr and its
    exit code (2 for a setting, 1 for a dependency or the database)."""
    try:
        print(asyncio.run(work()))
    except NAMED as error:
        return fail(*failure(error, database))
    return 0


def fail(code: int, line: str) -> int:
    """Print `line` as the process's one error line; returns `code`."""
    print(f"error: {line}", file=sys.stderr)
    return code
