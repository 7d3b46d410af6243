"""The bench playing SendGrid on the report path: one signed `delivered` event post per parked e-mail.

Each post is what the ESP emulator posts (and SendGrid, batching aside): a JSON array of one event,
compact, CRLF-terminated, signed with ECDSA P-256 over the timestamp and the body with the stack's
ESP signing key, whose public half both Herald's receipt server and the bench's receiver verify
with. The event carries the message's ids and unique args as the ESP holds them, so it names the
attempt (Herald) or the workflow (the floor) exactly as a real event would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bench.context import Bench
from emulator.esp.events import webhook_body
from emulator.esp.messages import new_sg_event_id
from herald.providers.sendgrid_signature import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign


def _signing_key(bench: Bench) -> ec.EllipticCurvePrivateKey:
    """The key the stack's ESP emulators sign their events with (devstack creates it at start)."""
    key = serialization.load_pem_private_key(bench.stack.config.esp_signing_key_path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def delivered_posts(
    bench: Bench, messages: list[dict[str, Any]], url: str
) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """One post to `url` per recipient of each message (as the ESP lists them): (url, what makes its
    httpx arguments, signed when called), for `bench.herald_run.post_reports`."""
    key = _signing_key(bench)
    posts = []
    for message in messages:
        for recipient in message["recipients"]:
            event = {
                "email": recipient["email"],
                "timestamp": int(time.time()),
                "event": "delivered",
                "sg_event_id": new_sg_event_id(),
                "sg_message_id": recipient["sg_message_id"],
                "smtp-id": message["message_id"],
                "response": "250 OK",
                **message["unique_args"],
            }
            posts.append((url, partial(_signed, key, webhook_body(event))))
    return posts


def _signed(key: ec.EllipticCurvePrivateKey, body: bytes) -> dict[str, Any]:
    """The post's httpx arguments, signed now: the receipt server refuses a timestamp minutes old, and a
    report path of thousands of posts takes minutes."""
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(key, body, timestamp),
               TIMESTAMP_HEADER: timestamp}  # fmt: skip
    return {"content": body, "headers": headers}
