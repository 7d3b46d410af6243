"""The Infobip emulator as tests run it in-process: on a fixed port in a thread of its own, stopped and
started again at the same URL (an outage), and a real HTTP receiver for its delivery reports.

Shared by the emulator tier (tests/emulator/conftest.py) and any stack test that needs an Infobip
outage; the stack's own Infobip process is tests/stack.py's `infobip` fixture.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from emulator.infobip.config import InfobipConfig
from emulator.infobip.server import InfobipServer

T = TypeVar("T")

API_KEY = "infobip-emulator-test-key"
AUTH = {"Authorization": f"App {API_KEY}"}


def fresh_number() -> str:
    """A destination no other test uses, in Infobip's international form without the +."""
    return "4179" + "".join(secrets.choice("0123456789") for _ in range(8))


class InfobipThread:
    """An ``InfobipServer`` in a daemon thread with its own event loop; its listener can be stopped and
    started again on the same port while its state, lifecycles and report posts go on."""

    def __init__(self, config: InfobipConfig) -> None:
        self.server = InfobipServer(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="infobip-emulator", daemon=True)

    def _call(self, work: Coroutine[Any, Any, T], timeout: float = 15.0) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def start(self) -> InfobipThread:
        self._thread.start()
        self._call(self.server.start())
        return self

    def stop_listening(self) -> None:
        """Clients are refused from now on (connection refused), until `listen`."""
        self._call(self.server.stop())

    def listen(self) -> None:
        """Listen again, on the same port."""
        self._call(self.server.start())

    def close(self) -> None:
        self._call(self.server.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def url(self) -> str:
        return self.server.url


@dataclass(frozen=True)
class ReportPost:
    """One POST of delivery reports as the receiver saw it."""

    name: str
    body: dict[str, Any]
    authorization: str | None
    content_type: str
    at: float  # time.monotonic() when it arrived
    answered: int

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.body["results"]


class ReportReceiver:
    """A real uvicorn server on 127.0.0.1 in a daemon thread, taking report POSTs at ``/dlr/{name}``.

    Bound to its port at construction, so a test can name its URL before it listens: until ``start``,
    a post to it is refused, as to a receiver that is down."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._lock = threading.Lock()
        self._posts: list[ReportPost] = []
        self._failures: dict[str, tuple[int, int]] = {}
        app = Starlette(routes=[Route("/dlr/{name}", self._handle, methods=["POST"])])
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        )
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, name="report-receiver", daemon=True
        )

    def start(self) -> ReportReceiver:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the report receiver did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def url(self, name: str) -> str:
        return f"{self.base_url}/dlr/{name}"

    def fail_next(self, name: str, times: int, status: int = 500) -> None:
        """Answer the next ``times`` POSTs to ``/dlr/{name}`` with ``status``."""
        with self._lock:
            self._failures[name] = (times, status)

    def posts(self, name: str) -> list[ReportPost]:
        with self._lock:
            return [post for post in self._posts if post.name == name]

    def wait_for(self, name: str, count: int, timeout: float = 10.0) -> list[ReportPost]:
        """The first ``count`` POSTs to ``name`` once they arrived; AssertionError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            posts = self.posts(name)
            if len(posts) >= count:
                return posts
            time.sleep(0.02)
        raise AssertionError(f"{name}: {len(self.posts(name))} report posts within {timeout} s, expected {count}")

    async def _handle(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = json.loads(await request.body())
        with self._lock:
            times, status = self._failures.get(name, (0, 200))
            if times > 0:
                self._failures[name] = (times - 1, status)
            else:
                status = 200
            self._posts.append(
                ReportPost(
                    name=name,
                    body=body,
                    authorization=request.headers.get("Authorization"),
                    content_type=request.headers.get("Content-Type", ""),
                    at=time.monotonic(),
                    answered=status,
                )
            )
        return Response(status_code=status)


# ---- talking to it ---------------------------------------------------------------------------------


def send(emulator: InfobipThread, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST /sms/3/messages with the test key (or `headers`)."""
    return httpx.post(
        f"{emulator.url}/sms/3/messages", json=body, headers=AUTH if headers is None else headers, timeout=10
    )


def sms(to: str, text: str = "Your code is 1234", **message: Any) -> dict[str, Any]:
    """A one-message send body; `message` adds or replaces the message's properties."""
    destination: dict[str, Any] = {"to": to}
    if "messageId" in message:
        destination["messageId"] = message.pop("messageId")
    return {"messages": [{"destinations": [destination], "content": {"text": text}, **message}]}


def reported(url: str, callback_data: str | None = None) -> dict[str, Any]:
    """A message's `webhooks` asking for reports at `url`."""
    webhooks: dict[str, Any] = {"delivery": {"url": url}}
    if callback_data is not None:
        webhooks["callbackData"] = callback_data
    return {"webhooks": webhooks}


def oracle(emulator: InfobipThread, to: str) -> list[dict[str, Any]]:
    """Every message the emulator accepted for `to`, as its admin API shows them."""
    return httpx.get(f"{emulator.url}/_emulator/messages", params={"to": to}).json()["messages"]


def wait_until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """`check()`'s first truthy answer; an AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer := check():
            return answer
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s: {what}")


def reports_at(receiver: ReportReceiver, name: str, count: int) -> list[dict[str, Any]]:
    """The first `count` reports posted to `name`, across batches, in arrival order."""

    def arrived() -> list[dict[str, Any]] | None:
        results = [result for post in receiver.posts(name) for result in post.results]
        return results[:count] if len(results) >= count else None

    return wait_until(arrived, f"{count} reports at {name}")


def final_status(emulator: InfobipThread, to: str, count: int = 1) -> list[dict[str, Any]]:
    """The messages to `to` once `count` of them reached a final status."""

    def done() -> list[dict[str, Any]] | None:
        messages = oracle(emulator, to)
        return messages if sum(m["status"]["groupName"] != "PENDING" for m in messages) >= count else None

    return wait_until(done, f"{count} final message(s) to {to}")


def declared(model: type) -> set[str]:
    """The JSON names an official client model declares."""
    return set(getattr(model, f"_{model.__name__}__properties"))


def logs(emulator: InfobipThread, **params: Any) -> httpx.Response:
    """GET /sms/3/logs with the test key."""
    return httpx.get(f"{emulator.url}/sms/3/logs", params=params, headers=AUTH)
