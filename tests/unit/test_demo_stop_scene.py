"""The demo's STOP scene posts the member's reply to the receipt server the stack's config names, on its port."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack import demo
from devstack.config import load_stack_config
from devstack.demo import InboundReplies, a_stop_reply_suppresses_marketing
from tests.keys import SESSION_KEYRING


class _Herald:
    """What the scene uses of a HeraldClient: the keyring that names the member, and send (recorded, not sent)."""

    keyring = SESSION_KEYRING

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, request: dict[str, Any]) -> None:
        self.sent.append(request)


async def _granted(*_: object, **__: object) -> None:
    """The ledger's consent row, not written: this test is about where the reply goes."""


@pytest.mark.parametrize("port", [8235, 18_235])
async def test_the_stop_reply_goes_to_the_configured_receipt_port(
    tmp_path: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the receipt server configured on `port` (and a number of its own), STOP is posted to that port."""
    stack_file = tmp_path / "stack.yaml"
    stack_file.write_text(f"receipts:\n  port: {port}\nemulator:\n  from_number: '+15005550099'\n")
    inbound = InboundReplies.of(load_stack_config(stack_file))
    posted: list[dict[str, str]] = []

    def emulator(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/_emulator/inbound"
        posted.append(json.loads(request.content))
        return httpx.Response(200, json={"webhook": {"http_status": 200}})

    monkeypatch.setattr(demo, "grant_consent", _granted)
    herald = _Herald()
    async with httpx.AsyncClient(transport=httpx.MockTransport(emulator), base_url="http://emulator.test") as admin:
        [row] = await a_stop_reply_suppresses_marketing(herald, admin, None, "t1", inbound)  # type: ignore[arg-type]
    [reply] = posted
    assert reply["url"] == f"http://127.0.0.1:{port}/twilio/inbound"
    assert (reply["to"], reply["body"], reply["from"]) == ("+15005550099", "STOP", row.recipient)
    assert row.note == "" and [request["recipient"] for request in herald.sent] == [row.recipient]
