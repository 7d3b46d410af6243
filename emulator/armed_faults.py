"""What both emulators share about faults: who may arm them, how a faults file is read, and the
registry that hands one fault use to each request for an armed recipient.

A fault is armed for one recipient (a phone number, an e-mail address) with a ``count`` (``None``
= always); every request to that recipient consumes one use, and a spent fault is gone, so the
recipient behaves normally again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


# Long enough for any client timeout under test, short enough that a forgotten
# fault cannot hold a connection (and the server's shutdown) for long.
MAX_HOLD_SECONDS = 600.0


class FaultBase(BaseModel):
    """What every emulator's fault has: how many requests it applies to (None: every one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int | None = Field(default=None, ge=1)


class _CountedFault(Protocol):
    count: int | None

    def model_dump(self) -> dict[str, Any]: ...


F = TypeVar("F", bound=_CountedFault)


class FaultRegistry(Generic[F]):
    """The faults armed on one emulator, keyed by recipient (normalised by `key`, e.g. lower-cased)."""

    def __init__(self, key: Callable[[str], str] = str) -> None:
        self._key = key
        self._armed: dict[str, _Armed[F]] = {}

    def arm(self, to: str, fault: F) -> None:
        """Arm `fault` for `to`, replacing any fault that recipient had."""
        self._armed[self._key(to)] = _Armed(to, fault)

    def disarm(self, to: str) -> bool:
        """Remove the fault of `to`; whether there was one."""
        return self._armed.pop(self._key(to), None) is not None

    def clear(self) -> None:
        self._armed.clear()

    def take(self, to: str) -> F | None:
        """The fault for one request to `to`, consuming one use of its count."""
        key = self._key(to)
        armed = self._armed.get(key)
        if armed is None:
            return None
        armed.used += 1
        if armed.remaining is not None:
            armed.remaining -= 1
            if armed.remaining <= 0:
                # Spent: the recipient behaves normally from the next request on.
                del self._armed[key]
        return armed.fault

    def describe(self) -> list[dict[str, Any]]:
        """Every armed fault with its parameters, remaining uses (None = always) and uses so far."""
        return [
            {"to": armed.to, **armed.fault.model_dump(), "remaining": armed.remaining, "used": armed.used}
            for armed in self._armed.values()
        ]


class _Armed(Generic[F]):
    """A fault and how much of its count is left; mutable, owned by the registry."""

    def __init__(self, to: str, fault: F) -> None:
        self.to = to
        self.fault = fault
        self.remaining = fault.count
        self.used = 0


def read_faults_file(path: Path, adapter: TypeAdapter[F]) -> list[tuple[str, F]]:
    """A faults file: a JSON list of ``{"to": ..., "fault": name, ...params}``, as (recipient, fault).

    Raises:
        ValueError: The file is not such a list or an entry is invalid.
    """
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a JSON list of fault objects")
    entries = []
    for entry in raw:
        if not isinstance(entry, dict) or "to" not in entry:
            raise ValueError("each fault entry must be an object with a 'to' recipient")
        params = {key: value for key, value in entry.items() if key != "to"}
        entries.append((entry["to"], adapter.validate_python(params)))
    return entries


A = TypeVar("A")


class Assignment(BaseModel, Generic[A]):
    """One entry of a faults file: a fault and the recipient it applies to (``Assignment[Fault]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    to: str = Field(min_length=1)
    fault: A


def load_assignments(path: Path, assignment: type[Assignment[A]], adapter: TypeAdapter[A]) -> tuple[Assignment[A], ...]:
    """A faults file's entries, each checked by `adapter` (``read_faults_file``)."""
    return tuple(assignment(to=to, fault=fault) for to, fault in read_faults_file(path, adapter))  # type: ignore[arg-type]


def refuse_foreign(request: Request, what: str) -> Response | None:
    """The 403 answer for a client that is not on loopback, else None: admin APIs arm faults and
    show every message, so nobody but the machine itself may call them."""
    host = request.client.host if request.client else ""
    if host == "::1" or host.startswith("127."):
        return None
    return JSONResponse({"error": f"the {what} admin API answers loopback clients only"}, status_code=403)


def fault_routes(
    prefix: str,
    registry: FaultRegistry[Any],
    adapter: TypeAdapter[Any],
    what: str,
    check_recipient: Callable[[str], str | None] = lambda to: None,
) -> list[Route]:
    """The admin routes that arm, list, disarm and clear faults, under `prefix` (loopback clients only):

        GET    {prefix}          armed faults
        PUT    {prefix}/{to}     arm {"fault": name, "count": n|null, ...params}; 422 when invalid
        DELETE {prefix}/{to}     disarm one recipient (404 when it had none)
        DELETE {prefix}          disarm all

    `check_recipient` returns why a recipient is not one this emulator serves, or None.
    """

    async def list_faults(request: Request) -> Response:
        if denied := refuse_foreign(request, what):
            return denied
        return JSONResponse({"faults": registry.describe()})

    async def arm_fault(request: Request) -> Response:
        if denied := refuse_foreign(request, what):
            return denied
        to = request.path_params["to"]
        if problem := check_recipient(to):
            return JSONResponse({"error": problem}, status_code=422)
        try:
            fault = adapter.validate_python(await request.json())
        except json.JSONDecodeError:
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        except ValidationError as error:
            details = error.errors(include_url=False, include_context=False, include_input=False)
            return JSONResponse({"error": "invalid fault", "details": details}, status_code=422)
        registry.arm(to, fault)
        return JSONResponse({"to": to, **fault.model_dump()})

    async def disarm_fault(request: Request) -> Response:
        if denied := refuse_foreign(request, what):
            return denied
        return Response(status_code=204 if registry.disarm(request.path_params["to"]) else 404)

    async def clear_faults(request: Request) -> Response:
        if denied := refuse_foreign(request, what):
            return denied
        registry.clear()
        return Response(status_code=204)

    return [
        Route(prefix, list_faults, methods=["GET"]),
        Route(prefix, clear_faults, methods=["DELETE"]),
        Route(f"{prefix}/{{to}}", arm_fault, methods=["PUT"]),
        Route(f"{prefix}/{{to}}", disarm_fault, methods=["DELETE"]),
    ]
