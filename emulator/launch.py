"""What the emulators' command lines share: building a server from its flags, and saying in one line
per problem why it cannot be built (never a traceback, never a secret the flags carried)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from emulator.config import LOOPBACK_HOSTS

S = TypeVar("S")


def built(name: str, build: Callable[[], S], host: str) -> S | None:
    """What `build` makes; None after naming each problem on stderr as `name: field: rule`. Binding
    beyond loopback is allowed, with a warning: the admin API still answers loopback clients only."""
    try:
        server = build()
    except ValidationError as error:
        # Name the field and the rule only: pydantic's default text echoes the input, secrets included.
        for problem in error.errors(include_url=False, include_context=False, include_input=False):
            field = ".".join(str(part) for part in problem["loc"]) or "settings"
            print(f"{name}: {field}: {problem['msg']}", file=sys.stderr)
        return None
    except (OSError, ValueError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return None
    if host not in LOOPBACK_HOSTS:
        print(
            f"{name}: binding {host}; the admin API still answers loopback clients only. "
            "This is a test tool: never expose it beyond a private network.",
            file=sys.stderr,
        )
    return server


def stop_on_signals() -> asyncio.Event:
    """An event SIGTERM and SIGINT set, in the running loop: a server's cue to stop and close."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop
