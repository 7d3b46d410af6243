"""The emulator plays a handset's reply as Twilio handles it: a keyword blocks or unblocks the pair
(later creates answer 21610 until START), and the number's webhook gets one signed form post.

A real emulator and a real receiver on 127.0.0.1 (the servers of tests/emulator/test_emulator.py);
the receiver checks every post's X-Twilio-Signature.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from emulator.app import create_app
from tests.emulator.test_emulator import (
    SENDER,
    SERVICE_SID,
    CallbackReceiver,
    ServerThread,
    _client,
    _emulator_config,
    fresh_number,
    send,
    twilio_error,
    wait_for_callbacks,
)

AUTH_TOKEN = "emulator-test-auth-token"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ServerThread, CallbackReceiver, ServerThread]]:
    receiver = CallbackReceiver(AUTH_TOKEN)
    receiving = ServerThread(receiver.app(), "inbound-receiver").start()
    emulator = ServerThread(create_app(_emulator_config(service_sender=SENDER)), "inbound-emulator").start()
    yield emulator, receiver, receiving
    emulator.stop()
    receiving.stop()


@pytest.fixture
async def http(servers: tuple[ServerThread, CallbackReceiver, ServerThread]) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(servers[0].base_url) as client:
        yield client


def webhook(servers: tuple[ServerThread, CallbackReceiver, ServerThread]) -> tuple[str, str]:
    """A fresh (url, path) on the receiver, standing in for the number's incoming-message webhook."""
    path = f"/cb/inbound-{secrets.token_hex(6)}"
    return f"{servers[2].base_url}{path}", path


async def reply(http: httpx.AsyncClient, handset: str, body: str, **fields: Any) -> dict[str, Any]:
    response = await http.post("/_emulator/inbound", json={"from": handset, "body": body, **fields})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_stop_posts_a_signed_form_and_blocks_the_pair_until_start(
    http: httpx.AsyncClient, servers: tuple[ServerThread, CallbackReceiver, ServerThread]
) -> None:
    """STOP: the webhook gets Twilio's signed form; creates from that number to the handset answer
    21610 (another sender is not blocked) until START lets them through again."""
    handset = fresh_number()
    url, path = webhook(servers)
    answer = await reply(http, handset, " stop ", url=url)
    assert answer["keyword"] == "STOP" and answer["blocked"] is True
    assert answer["twilio_reply"].startswith("You have successfully been unsubscribed")
    assert answer["webhook"]["http_status"] == 204
    [posted] = await wait_for_callbacks(servers[1], path, 1)
    assert posted.signature_ok
    assert posted.params["MessageSid"] == answer["message_sid"] and posted.params["SmsStatus"] == "received"
    assert (posted.params["From"], posted.params["To"], posted.params["Body"]) == (handset, SENDER, " stop ")
    assert "OptOutType" not in posted.params

    twilio_error(await send(http, handset), 400, 21610)
    assert (await send(http, handset, From="+15017122662")).status_code == 201  # another of our numbers
    assert (await http.get("/_emulator/stats")).json()["rejected_by_code"]["21610"] >= 1

    again = await reply(http, handset, "START", url=url)
    assert again["keyword"] == "START" and again["blocked"] is False
    assert (await send(http, handset)).status_code == 201


async def test_a_message_that_is_not_only_a_keyword_blocks_nothing(http: httpx.AsyncClient) -> None:
    """'stop please' is passed on and blocks nothing, as Twilio filters single words only."""
    handset = fresh_number()
    answer = await reply(http, handset, "stop please")
    assert answer["keyword"] is None and answer["blocked"] is False and answer["twilio_reply"] is None
    assert (await send(http, handset)).status_code == 201


async def test_without_a_webhook_the_block_is_still_made(http: httpx.AsyncClient) -> None:
    """Twilio blocks on STOP even when the number has no incoming-message URL."""
    handset = fresh_number()
    answer = await reply(http, handset, "QUIT")
    assert answer["webhook"] is None and answer["blocked"] is True
    twilio_error(await send(http, handset), 400, 21610)
    listed = (await http.get("/_emulator/opt-outs")).json()["opt_outs"]
    assert {"handset": handset, "sender": SENDER} in listed


async def test_a_stop_to_a_messaging_service_number_blocks_the_whole_service(
    http: httpx.AsyncClient, servers: tuple[ServerThread, CallbackReceiver, ServerThread]
) -> None:
    """A number in a Messaging Service: the opt-out covers the service (creates naming it answer 21610)."""
    handset = fresh_number()
    url, path = webhook(servers)
    await reply(http, handset, "STOP", url=url, messaging_service_sid=SERVICE_SID, advanced_opt_out=True)
    [posted] = await wait_for_callbacks(servers[1], path, 1)
    assert posted.params["MessagingServiceSid"] == SERVICE_SID and posted.params["OptOutType"] == "STOP"
    twilio_error(await send(http, handset, From=None, MessagingServiceSid=SERVICE_SID), 400, 21610)


async def test_the_webhook_is_posted_once_even_when_it_answers_5xx(
    http: httpx.AsyncClient, servers: tuple[ServerThread, CallbackReceiver, ServerThread]
) -> None:
    """Twilio does not retry an incoming-message webhook on a 5xx; a replay names the same MessageSid."""
    url, path = webhook(servers)
    servers[1].fail_next(path, 1)
    first = await reply(http, fresh_number(), "HELP", url=url)
    assert first["webhook"]["http_status"] == 500
    assert len(servers[1].received(path)) == 1
    replayed = await reply(http, fresh_number(), "HELP", url=url, message_sid=first["message_sid"])
    assert replayed["message_sid"] == first["message_sid"] and replayed["webhook"]["http_status"] == 204
    assert [item.params["MessageSid"] for item in servers[1].received(path)] == [first["message_sid"]] * 2


@pytest.mark.parametrize(
    "fields",
    [
        {"from": "15551234567", "body": "STOP"},
        {"from": "+15551234567", "body": "x" * 1601},
        {"from": "+15551234567", "body": "STOP", "url": "http://example.com/inbound"},
        {"from": "+15551234567", "body": "STOP", "surprise": 1},
    ],
    ids=["not-e164", "too-long", "foreign-url", "unknown-field"],
)
async def test_a_bad_inbound_request_is_refused_and_changes_nothing(
    http: httpx.AsyncClient, fields: dict[str, Any]
) -> None:
    """422 for a request the emulator cannot play; no block is made."""
    response = await http.post("/_emulator/inbound", json=fields)
    assert response.status_code == 422, response.text
    assert not [o for o in (await http.get("/_emulator/opt-outs")).json()["opt_outs"] if o["handset"] == fields["from"]]


async def test_reset_forgets_the_opt_outs() -> None:
    """POST /_emulator/reset: the blocked pairs go with the messages and faults."""
    emulator = ServerThread(create_app(_emulator_config()), "inbound-reset-emulator").start()
    try:
        async with _client(emulator.base_url) as http:
            handset = fresh_number()
            await reply(http, handset, "STOP", to=SENDER)
            assert (await http.post("/_emulator/reset")).status_code == 200
            assert (await http.get("/_emulator/opt-outs")).json()["opt_outs"] == []
            assert (await send(http, handset)).status_code == 201
    finally:
        emulator.stop()
