"""Recipients and bodies never reach Temporal in plaintext; the codec server shows them to whoever holds the token.

Real Temporal dev server, real worker, real emulators: an intent is sent, its history fetched
raw from the server (no codec applied) and searched for the recipient and a unique body marker;
then the same payloads go through the codec server over real HTTP, and through the `temporal`
CLI pointed at it, and come back readable. A failure's message (an exception's text, which may
quote what it was given) is sealed the same way.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from google.protobuf import json_format
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from devstack.processes import BIN_DIR, wait_for_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.codec.server import create_codec_app
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.privacy.payload_codec import ENCODING, decode_in_place, payloads_in
from herald.temporal.client import payload_codec
from tests.intents import ORDER_DATA, email_request, fresh_address, fresh_key, fresh_recipient, receipt_request

WAIT = 90
TOKEN = secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
async def codec_server(stack: LocalStack, settings) -> AsyncIterator[str]:
    """The codec app over real HTTP, on the port the test stack's Web UI was started with."""
    codec = payload_codec(settings.temporal.codec)
    assert codec is not None, "the test stack must configure a payload key"
    app = create_codec_app(codec, token=TOKEN, cors_origins=settings.codec_server.cors_origins)
    c = stack.config.codec
    server = uvicorn.Server(uvicorn.Config(app, host=c.host, port=c.port, log_level="warning", access_log=False))
    serving = asyncio.create_task(server.serve())
    for _ in range(250):
        if server.started:
            break
        await asyncio.sleep(0.02)
    assert server.started, "codec server did not start"
    yield stack.config.codec_endpoint
    server.should_exit = True
    await asyncio.wait_for(serving, timeout=10)


def _forms_of_phone(number: str) -> list[str]:
    return [number, quote(number, safe=""), number.lstrip("+"), number[2:]]


def _forms_of_address(address: str) -> list[str]:
    return [address, quote(address, safe=""), address.split("@")[0]]


def _assert_nowhere_in(history: WorkflowHistory, secrets_: list[str]) -> None:
    raw = b"".join(event.SerializeToString() for event in history.events)
    as_json = history.to_json()
    for secret in secrets_:
        assert secret.encode() not in raw, f"a plaintext form ({len(secret)} chars) is in the raw history"
        assert secret not in as_json


def _assert_encrypted(history: WorkflowHistory) -> None:
    """Every payload is encrypted but the ones Temporal itself must read or the SDK's core writes:
    search attributes, and the `data` / `patch-data` details of local-activity and patch markers
    (sequence numbers, activity type, times)."""
    exempt: set[bytes] = set()
    for event in history.events:
        indexed = [
            event.workflow_execution_started_event_attributes.search_attributes,
            event.upsert_workflow_search_attributes_event_attributes.search_attributes,
        ]
        details = event.marker_recorded_event_attributes.details
        core_written = [details[name] for name in ("data", "patch-data") if name in details]
        exempt |= {payload.SerializeToString() for payload in payloads_in(indexed + core_written)}
    found = [p for p in payloads_in(history.events) if p.data and p.SerializeToString() not in exempt]
    assert found, "the history has no payloads at all"
    assert {p.metadata.get("encoding") for p in found} == {ENCODING}


async def _decode_over_http(endpoint: str, history: WorkflowHistory, headers: dict[str, str]) -> httpx.Response:
    body = json_format.MessageToDict(Payloads(payloads=payloads_in(history.events)))
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(f"{endpoint}/decode", json=body, headers=headers)


def _decoded_text(response: httpx.Response) -> str:
    decoded = json_format.ParseDict(response.json(), Payloads())
    return "\n".join(p.data.decode("utf-8", "replace") for p in decoded.payloads)


@pytest.fixture
def herald(herald: HeraldClient) -> HeraldClient:
    """A client without the ledger's recipient keys: what the codec layer alone protects and reveals.
    (With the keys, the decoded payloads hold sealed tokens instead: test_crypto_shredding.py.)"""
    return herald.with_vault(None)


async def test_an_sms_history_holds_neither_recipient_nor_body_and_the_codec_server_reveals_both(
    herald: HeraldClient, codec_server: str
) -> None:
    """Raw history: no form of the number, no body marker, every payload encrypted; /decode with the token shows both, without it 401."""
    key, to, marker = fresh_key(), fresh_recipient(), f"enc_{secrets.token_hex(8)}"
    render_data = {"order_ref": marker, "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
    await herald.send(receipt_request(key, to, render_data=render_data))
    final = await asyncio.wait_for(herald.wait(key), WAIT)
    assert final.state is IntentState.DELIVERED
    history = await herald.handle(key).fetch_history()

    _assert_nowhere_in(history, _forms_of_phone(to) + [marker])
    _assert_encrypted(history)

    refused = await _decode_over_http(codec_server, history, {})
    assert refused.status_code == 401 and to not in refused.text
    decoded = await _decode_over_http(codec_server, history, {"Authorization": f"Bearer {TOKEN}"})
    assert decoded.status_code == 200
    text = _decoded_text(decoded)
    assert to in text and marker in text
    # The replay recorder's path: decoded in place, the history it writes as JSON is plaintext.
    await decode_in_place(history.events, herald.temporal.data_converter.payload_codec)
    written = WorkflowHistory.from_json(history.workflow_id, history.to_json_dict())
    assert marker.encode() in b"".join(p.data for p in payloads_in(written.events))


async def test_an_email_history_holds_no_address_and_the_codec_server_reveals_it(herald: HeraldClient, codec_server: str) -> None:
    """The e-mail channel too: the address and the marker only appear after /decode."""
    key, to, marker = fresh_key(), fresh_address(), f"enc_{secrets.token_hex(8)}"
    await herald.send(email_request(key, to, render_data={**ORDER_DATA, "order_ref": marker}))
    final = await asyncio.wait_for(herald.wait(key, Channel.EMAIL), WAIT)
    assert final.state is IntentState.DELIVERED, final.transitions
    history = await herald.handle(key, Channel.EMAIL).fetch_history()

    _assert_nowhere_in(history, _forms_of_address(to) + [marker])
    _assert_encrypted(history)

    decoded = await _decode_over_http(codec_server, history, {"Authorization": f"Bearer {TOKEN}"})
    assert decoded.status_code == 200
    text = _decoded_text(decoded)
    assert to in text and marker in text


async def test_the_temporal_cli_decodes_through_the_codec_server(herald: HeraldClient, stack: LocalStack, codec_server: str) -> None:
    """`temporal workflow show --codec-endpoint --codec-auth` (an operator's view) prints the recipient; without the codec it cannot."""
    key, to = fresh_key(), fresh_recipient()
    receipt = await herald.send(receipt_request(key, to))
    await asyncio.wait_for(herald.wait(key), WAIT)
    t = stack.config.temporal
    base = [str(BIN_DIR / "temporal"), "workflow", "show", "--address", f"{t.host}:{t.port}", "--namespace", t.namespace,
            "--workflow-id", receipt.workflow_id, "--output", "json"]  # fmt: skip

    async def payload_text(*extra: str) -> str:
        """What the CLI shows of every payload's data (its JSON output keeps data base64)."""
        process = await asyncio.create_subprocess_exec(*base, *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode(errors="replace")[-500:]
        shown = WorkflowHistory.from_json(receipt.workflow_id, json.loads(out))
        return "\n".join(p.data.decode("utf-8", "replace") for p in payloads_in(shown.events))

    assert to not in await payload_text()
    assert to in await payload_text("--codec-endpoint", codec_server, "--codec-auth", f"Bearer {TOKEN}")


async def test_the_dev_web_ui_is_pointed_at_the_codec_server(stack: LocalStack) -> None:
    """The test stack's Web UI reports the codec endpoint it sends payloads to (set by --ui-codec-endpoint)."""
    t = stack.config.temporal
    await asyncio.to_thread(wait_for_port, t.host, t.ui_port, 30)
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"http://{t.host}:{t.ui_port}/api/v1/settings")
    response.raise_for_status()
    assert response.json()["Codec"]["Endpoint"] == stack.config.codec_endpoint, json.dumps(response.json()["Codec"])


@activity.defn(name="HeraldTestRefuse")
async def refuse(marker: str) -> None:
    """An activity whose exception quotes its input, as a refusal naming what it was given would."""
    raise ApplicationError(f"refused {marker}", non_retryable=True)


@workflow.defn(name="HeraldTestRefusal", sandboxed=False)
class Refusal:
    """Runs `refuse` once and fails with it: an activity failure and a workflow failure in one history."""

    @workflow.run
    async def run(self, marker: str) -> None:
        await workflow.execute_activity(
            refuse, marker, start_to_close_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=1)
        )


def _failures(history: WorkflowHistory) -> list[Failure]:
    """Every failure of the history's failed events, with the failures that caused them."""
    found: list[Failure] = []
    for event in history.events:
        for name in ("activity_task_failed_event_attributes", "workflow_execution_failed_event_attributes"):
            if event.HasField(name):
                failure = getattr(event, name).failure
                found.append(failure)
                while failure.HasField("cause"):
                    failure = failure.cause
                    found.append(failure)
    return found


async def test_a_failures_message_is_encrypted_in_history_and_opens_with_the_codec(
    temporal: Client, settings: Any
) -> None:
    """A failed activity's message, and the workflow failure that carries it: fetched raw, every message field
    reads "Encoded failure" and the text is an encrypted payload; through the codec, it is the exception's text."""
    marker = f"enc_{secrets.token_hex(8)}"
    task_queue = f"herald-failure-{secrets.token_hex(4)}"
    # The session's client, made by herald.temporal.client.connect; the worker takes its converter.
    worker = Worker(
        temporal, task_queue=task_queue, workflows=[Refusal], activities=[refuse],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )  # fmt: skip
    async with worker:
        handle = await temporal.start_workflow(Refusal.run, marker, id=task_queue, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), WAIT)
    # The client, holding the codec, reads the exception's own text.
    assert isinstance(failed.value.cause, ActivityError)
    assert isinstance(failed.value.cause.cause, ApplicationError)
    assert failed.value.cause.cause.message == f"refused {marker}"

    history = await handle.fetch_history()
    failures = _failures(history)
    assert len(failures) == 3, failures  # the activity's; the workflow's and, as its cause, the activity's again
    assert {f.message for f in failures} == {"Encoded failure"} and {f.stack_trace for f in failures} == {""}
    assert {f.encoded_attributes.metadata.get("encoding") for f in failures} == {ENCODING}
    _assert_nowhere_in(history, [marker])

    await decode_in_place(history.events, payload_codec(settings.temporal.codec))
    opened = [json.loads(f.encoded_attributes.data) for f in _failures(history)]
    assert [attributes["message"] for attributes in opened] == [
        f"refused {marker}", "Activity task failed", f"refused {marker}"
    ]
    assert "raise ApplicationError" in opened[0]["stack_trace"]
